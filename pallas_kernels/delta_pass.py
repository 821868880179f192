"""The delta rules' state pass across chunks on Triton (GPU), over chunk factors formed beforehand: forward and
backward, one kernel each (the Triton twin of `delta_tpu`: the same arrays in and out, fp32 ones alike).

With the chunk factors w, u_v, k_to_end, q_from_start, scores and decay d of each chunk (the gated and
the generalized delta rule's `reference.chunk_factors` in `ccq_jax.ops._src`):

    u_n = u_v,n - w_n S_n,   o_n = scale (q_from_start,n S_n + scores_n u_n),
    S_{n+1} = d_n (.) S_n + k_to_end,n^T u_n.

Arrays are `[B, H, N, C, W]` in the inputs' dtype (bf16 inputs: bf16 factors, half the registers of
fp32 tiles), W a power of two >= 16; d is `[B, H, N, R, 1]` fp32 with R = 1 (one decay per head and chunk)
or R = Kp (one per key row of the state: the generalized rule's per-channel decay); states fp32. One
program per (V slab, batch * head) holds a `[Kp, BV]` slab of the state in registers and walks the chunks
in a loop (the backward from the last, carrying the state's gradient); the backward's products that contract
over V (the gradients of w, k_to_end, q_from_start and the scores) are batched XLA products after its kernel,
from the states and state gradients it writes per chunk (d's gradient comes per V slab, summed).

Precision: every product with operands in the inputs' dtype (the state rounded to it where it meets a
factor) and fp32 accumulation, as fla's and `delta_rule`'s Triton passes; fp32 inputs: IEEE fp32 dots.
(`delta_tpu` keeps the state's path in fp32 at HIGHEST; here fp32 factors with bf16 hi + lo products spilled
1.3-3.9 KB in the backward at K = V = 128 at every tiling tried, against none as it is.) Gradients come out fp32.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, batch_head, dot, launch

f32 = jnp.float32


def _mm(a, b, dtype, **kw):
    """a @ b with operands in `dtype` (the inputs'), fp32 accumulation."""
    return dot(a.astype(dtype), b.astype(dtype), **kw)


def _row_decay(d_ref, b, h, n):
    """d_n as a column to scale the state's rows: [Kp, 1] per key row, [1, 1] per head."""
    rows = d_ref.shape[3]
    return jnp.reshape(d_ref[b, h, n, pl.ds(0, rows), 0], (rows, 1))


def _tiling(kp, vp, config, backward):
    """(V slab width, warps): what `ptxas -v` measured without spills (bf16, chunk 64) through
    `benchmarks/kernel_resources.py`'s compile. Forward: 64-wide at 4 warps at K = V = 128 (KDA-1.3B's heads; 255
    registers, the cap, with no spills; 8 warps would take 194), 32-wide at 8 warps at K = 256, V = 512 (139, and
    159 emitting the states). Backward, which carries only the state's gradient:
    32-wide at 8 warps (129 registers at K = V = 128, 179 at K = 256, V = 512; 64-wide slabs spilled at K = 256).
    Not yet timed on a GPU."""
    if backward:
        return config.block(vp, 32), 8
    return (config.block(vp, 64), 4) if kp <= 128 else (config.block(vp, 32), 8)


def forward(w, u_v, k_to_end, q_from_start, scores, decay, h0, *, scale, dtype, emit_states, interpret,
            config=DEFAULT_CONFIG):
    """(o [B, H, N, C, Vp] fp32, final state [B, H, Kp, Vp] fp32, and the states entering each chunk
    [B, H, N, Kp, Vp] fp32 when `emit_states`); dtype: the inputs' dtype (the output path's operands)."""
    b_, heads, n_chunks, chunk, kp = w.shape
    vp = u_v.shape[-1]
    bv, warps = _tiling(kp, vp, config, backward=False)
    ks, cs = pl.ds(0, kp), pl.ds(0, chunk)

    def kernel(w_ref, uv_ref, ke_ref, qs_ref, p_ref, d_ref, h0_ref, o_ref, final_ref, *states_ref):
        b, h = batch_head(1, heads)
        vs = pl.ds(pl.program_id(0) * bv, bv)

        def step(n, S):
            if emit_states:
                states_ref[0][b, h, n, ks, vs] = S
            u = uv_ref[b, h, n, cs, vs] - _mm(w_ref[b, h, n, cs, ks], S, dtype)
            o = dot(qs_ref[b, h, n, cs, ks].astype(dtype), S.astype(dtype)) + dot(
                p_ref[b, h, n, cs, cs].astype(dtype), u.astype(dtype))
            o_ref[b, h, n, cs, vs] = scale * o
            return _row_decay(d_ref, b, h, n) * S + _mm(ke_ref[b, h, n, cs, ks], u, dtype, trans_a=True)

        final_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, h0_ref[b, h, ks, vs])

    outs = [jax.ShapeDtypeStruct(u_v.shape, f32), jax.ShapeDtypeStruct((b_, heads, kp, vp), f32)]
    if emit_states:
        outs.append(jax.ShapeDtypeStruct((b_, heads, n_chunks, kp, vp), f32))
    return launch(kernel, tuple(outs), (vp // bv, b_ * heads), interpret=interpret, config=config, num_warps=warps,
                  num_stages=1, name="delta_pass_forward")(w, u_v, k_to_end, q_from_start, scores, decay, h0)


def _products(x, y, dims, dtype):
    """A batched product over [B, H, N, ...] (einsum `dims`) with operands in `dtype` and fp32 results, rounded as
    the kernels round theirs (fp32: IEEE)."""
    precision = jax.lax.Precision.HIGHEST if jnp.dtype(dtype).itemsize >= 4 else None
    return jnp.einsum(dims, x.astype(dtype), y.astype(dtype), precision=precision, preferred_element_type=f32)


def backward(w, u_v, k_to_end, q_from_start, scores, decay, states, do, dfinal, *, scale, dtype, interpret,
             config=DEFAULT_CONFIG):
    """(dw, du_v, dk_to_end, dq_from_start, dscores, ddecay (in decay's shape), dh0), all fp32; states: those
    entering each chunk (`forward`'s with emit_states).

    The kernel walks the chunks in reverse carrying only the state's gradient dS (leaving chunk n):
    du = scale scores^T do + k_to_end dS, dS <- d (.) dS + scale q_from_start^T do - w^T du; it writes du and each
    chunk's dS. The products that contract over V, independent per chunk, are batched XLA products after it:
    dw = -du S^T, dk_to_end = u dS^T, dq_from_start = scale do S^T, dscores = scale do u^T (u = u_v - w S), and
    d's gradient sum_v S dS, per V slab of the kernel and summed."""
    b_, heads, n_chunks, chunk, kp = w.shape
    vp = u_v.shape[-1]
    rows = decay.shape[3]
    bv, warps = _tiling(kp, vp, config, backward=True)
    n_v = vp // bv
    ks, cs = pl.ds(0, kp), pl.ds(0, chunk)

    def kernel(w_ref, ke_ref, qs_ref, p_ref, d_ref, hs_ref, do_ref, df_ref, duv_ref, dhs_ref, dd_ref, dh0_ref):
        vt = pl.program_id(0)
        b, h = batch_head(1, heads)
        vs = pl.ds(vt * bv, bv)

        def step(i, dS):  # dS: the gradient of the state leaving chunk n
            n = n_chunks - 1 - i
            w, do = w_ref[b, h, n, cs, ks], do_ref[b, h, n, cs, vs].astype(dtype)
            du = scale * dot(p_ref[b, h, n, cs, cs].astype(dtype), do, trans_a=True) + _mm(ke_ref[b, h, n, cs, ks],
                                                                                         dS, dtype)
            duv_ref[b, h, n, cs, vs] = du
            dhs_ref[b, h, n, ks, vs] = dS
            dd = jnp.sum(hs_ref[b, h, n, ks, vs] * dS, axis=1)  # [Kp]: per key row
            dd_ref[vt, b, h, n, pl.ds(0, rows)] = dd if rows > 1 else jnp.reshape(jnp.sum(dd), (1,))
            return (_row_decay(d_ref, b, h, n) * dS + scale * dot(qs_ref[b, h, n, cs, ks].astype(dtype), do,
                                                                  trans_a=True)
                    - _mm(w, du, dtype, trans_a=True))

        dh0_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, df_ref[b, h, ks, vs])

    outs = (jax.ShapeDtypeStruct(u_v.shape, f32), jax.ShapeDtypeStruct(states.shape, f32),
            jax.ShapeDtypeStruct((n_v, b_, heads, n_chunks, rows), f32), jax.ShapeDtypeStruct((b_, heads, kp, vp), f32))
    du_v, dstates, dd, dh0 = launch(kernel, outs, (n_v, b_ * heads), interpret=interpret, config=config,
                                    num_warps=warps, num_stages=1, name="delta_pass_backward")(
        w, k_to_end, q_from_start, scores, decay, states, do, dfinal)
    u = u_v.astype(f32) - _products(w, states, "bhnck,bhnkv->bhncv", dtype)
    dw = -_products(du_v, states, "bhncv,bhnkv->bhnck", dtype)
    dke = _products(u, dstates, "bhncv,bhnkv->bhnck", dtype)
    dqs = scale * _products(do, states, "bhncv,bhnkv->bhnck", dtype)
    dp = scale * _products(do, u, "bhncv,bhnmv->bhncm", dtype)
    return dw, du_v, dke, dqs, dp, jnp.sum(dd, axis=0)[..., None], dh0
