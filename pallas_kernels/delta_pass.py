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
in a loop (the backward from the last); the products that contract over V (the gradients of w, k_to_end,
q_from_start, the scores and d) come out per V slab, summed by the caller.

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
    """(V slab width, warps): what `ptxas -v` measured without spills at K = V = 128 (bf16, chunk 64; KDA-1.3B's
    heads) through `benchmarks/kernel_resources.py`'s compile: the forward 64-wide at 4 warps (194 registers; at
    K = 256, 32-wide at 8 warps, 139), the backward, with more tiles live, 16-wide at 8 warps (170 registers, where
    32-wide slabs spilled 108 bytes; at K = 256 it spills 328). Not yet timed on a GPU."""
    if backward:
        return config.block(vp, 16), 8
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


def backward(w, u_v, k_to_end, q_from_start, scores, decay, states, do, dfinal, *, scale, dtype, interpret,
             config=DEFAULT_CONFIG):
    """(dw, du_v, dk_to_end, dq_from_start, dscores, ddecay (in decay's shape), dh0), all fp32, the chunks walked
    in reverse; states: those entering each chunk (`forward`'s with emit_states)."""
    b_, heads, n_chunks, chunk, kp = w.shape
    vp = u_v.shape[-1]
    rows = decay.shape[3]
    bv, warps = _tiling(kp, vp, config, backward=True)
    n_v = vp // bv
    ks, cs = pl.ds(0, kp), pl.ds(0, chunk)

    def kernel(w_ref, uv_ref, ke_ref, qs_ref, p_ref, d_ref, hs_ref, do_ref, df_ref,
               dw_ref, duv_ref, dke_ref, dqs_ref, dp_ref, dd_ref, dh0_ref):
        vt = pl.program_id(0)
        b, h = batch_head(1, heads)
        vs = pl.ds(vt * bv, bv)

        def step(i, dS):  # dS: the gradient of the state leaving chunk n
            n = n_chunks - 1 - i
            w, ke = w_ref[b, h, n, cs, ks], ke_ref[b, h, n, cs, ks]
            qs, P = qs_ref[b, h, n, cs, ks].astype(dtype), p_ref[b, h, n, cs, cs].astype(dtype)
            S, do = hs_ref[b, h, n, ks, vs], do_ref[b, h, n, cs, vs].astype(dtype)
            u = uv_ref[b, h, n, cs, vs] - _mm(w, S, dtype)
            du = scale * dot(P, do, trans_a=True) + _mm(ke, dS, dtype)
            duv_ref[b, h, n, cs, vs] = du
            dw_ref[vt, b, h, n, cs, ks] = -_mm(du, S, dtype, trans_b=True)
            dke_ref[vt, b, h, n, cs, ks] = _mm(u, dS, dtype, trans_b=True)
            dqs_ref[vt, b, h, n, cs, ks] = scale * dot(do, S.astype(dtype), trans_b=True)
            dp_ref[vt, b, h, n, cs, cs] = scale * dot(do, u.astype(dtype), trans_b=True)
            dd = jnp.sum(S * dS, axis=1)  # [Kp]: per key row
            dd_ref[vt, b, h, n, pl.ds(0, rows)] = dd if rows > 1 else jnp.reshape(jnp.sum(dd), (1,))
            return (_row_decay(d_ref, b, h, n) * dS + scale * dot(qs, do, trans_a=True)
                    - _mm(w, du, dtype, trans_a=True))

        dh0_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, df_ref[b, h, ks, vs])

    per_slab = lambda x: jax.ShapeDtypeStruct((n_v, *x.shape), f32)
    outs = (per_slab(w), jax.ShapeDtypeStruct(u_v.shape, f32), per_slab(k_to_end), per_slab(q_from_start),
            per_slab(scores), jax.ShapeDtypeStruct((n_v, b_, heads, n_chunks, rows), f32),
            jax.ShapeDtypeStruct((b_, heads, kp, vp), f32))
    dw, du_v, dke, dqs, dp, dd, dh0 = launch(kernel, outs, (n_v, b_ * heads), interpret=interpret, config=config,
                                             num_warps=warps, num_stages=1, name="delta_pass_backward")(
        w, u_v, k_to_end, q_from_start, scores, decay, states, do, dfinal)
    total = lambda x: jnp.sum(x, axis=0)
    return total(dw), du_v, total(dke), total(dqs), total(dp), total(dd)[..., None], dh0
