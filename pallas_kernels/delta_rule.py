"""The sequential passes of the chunked gated delta rule (fla's `chunk_gated_delta_rule_fwd_h` / `_bwd_dhu`), and
the per-chunk gradients of q, k, w and the gates given the states (fla's `chunk_bwd_dqkwg`).

With the WY/UT form done per chunk beforehand (w = T (beta exp(G) k), u = T (beta v),
T = (I + A)^-1), the state crossing chunk boundaries obeys

    v_new = u - w S_n;   S_{n+1} = exp(G_last) keep S_n + (k exp(G_last - G) writes)^T v_new

and its gradient runs the other way. The correction `w S_n` contracts over all of K, so one
program holds a `[K, BV]` slab of the state (fla does the same; K <= 256 keeps it in registers).
The gates being per head, the two passes take their factors ready-made from the caller, fp32 and
tiny: `read` = exp(G) reads, `write` = exp(G_last - G) writes ([B, Tp, H]), `decay` = exp(G_last)
keep ([B, N, H]), a load each inside the sequential loop instead of the gates, the masks and the
exponentials (H200, B = 4, T = 4096: `delta_states` 0.42 -> 0.40 ms, Gated DeltaNet fwd+bwd
3.34 -> 3.19 together with the per-chunk `keep` of every kernel). `delta_dqkwg` takes the gates
themselves (`G [B, Tp, H]`, the inclusive in-chunk cumsum); layouts as in `linear_attention`.
With fp32 operands the `[C, K]` tiles are twice as large, so those kernels take narrower V slabs
and no software pipelining (with 64-wide slabs and two stages, fp32 at K = 256 asked for 296 KB
of shared memory on the H200, which has 227 KB).
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import (DEFAULT_CONFIG, batch_head, chunk_decay, dot, from_start, gate_row, gate_tile,
                                  iota, launch,
                                   masked_exp, tile, to_end)

f32 = jnp.float32


def _tiling(dv, dtype, config, *, warps, width=64):
    """(V slab width, launch options) for the full-K kernels: `width`-wide slabs at `warps` for half-precision
    inputs (H200, B = 4, T = 4096, H = 6, V = 512: delta_states 0.42 ms at 64 / 4 warps against 0.46 with 32-wide
    slabs and 1.10 at 2 warps); fp32 inputs, whose [C, K] tiles are twice as large: 32-wide slabs at 8 warps, one
    stage, whatever `warps` and `width`."""
    if jnp.dtype(dtype).itemsize >= 4:
        return config.block(dv, 32), dict(num_warps=8, num_stages=1)
    return config.block(dv, width), dict(num_warps=warps, num_stages=2)


def delta_states(w, u, k, write, decay, h0, *, chunk, store, interpret, config=DEFAULT_CONFIG):
    """The forward pass, given the factors `write` [B, Tp, H] and `decay` [B, N, H] (see the module's docstring).
    Returns (state entering each chunk `[B, N, H, K, V]` in `store`, v_new `[B, Tp, H, V]` in u's dtype, final
    state fp32)."""
    b_, tp, heads, dk = k.shape
    dv = u.shape[-1]
    bv, options = _tiling(dv, w.dtype, config, warps=4)
    n_chunks = tp // chunk
    ks = pl.ds(0, dk)

    def kernel(w_ref, u_ref, k_ref, f_ref, d_ref, h0_ref, hs_ref, vn_ref, ht_ref):
        vt = pl.program_id(0)
        b, h = batch_head(1, heads)
        vs = pl.ds(vt * bv, bv)

        def step(n, S):
            t0 = n * chunk
            rows = pl.ds(t0, chunk)
            hs_ref[b, n, h, ks, vs] = S.astype(hs_ref.dtype)
            w_t = w_ref[b, rows, h, ks]
            v_new = u_ref[b, rows, h, vs].astype(f32) - dot(w_t, S.astype(w_t.dtype))
            vn_ref[b, rows, h, vs] = v_new.astype(vn_ref.dtype)
            v_end = (v_new * f_ref[b, rows, h][:, None]).astype(w_t.dtype)  # the decay on the [C, BV] side
            return S * jnp.reshape(d_ref[b, pl.ds(n, 1), h], (1, 1)) + dot(k_ref[b, rows, h, ks], v_end, trans_a=True)

        ht_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, h0_ref[b, h, ks, vs].astype(f32))

    outs = (jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store), jax.ShapeDtypeStruct(u.shape, u.dtype),
            jax.ShapeDtypeStruct((b_, heads, dk, dv), f32))
    return launch(kernel, outs, (dv // bv, b_ * heads), interpret=interpret, config=config, name="delta_states",
                  **options)(w, u, k, write, decay, h0)


def delta_dstates(q, k, w, do, dv_local, read, write, decay, dfinal, *, chunk, scale, store, interpret,
                  config=DEFAULT_CONFIG):
    """The backward pass of the state, from the last chunk to the first (the factors `read`, `write` [B, Tp, H]
    and `decay` [B, N, H] as in the module's docstring).

    dv_local: the gradient of v_new through the intra-chunk output (scale A^T do). Per chunk
    (from the end): dv_new = dv_local + (k write) dS; dS <- decay dS + scale (q read)^T do - w^T dv_new.
    Returns (dS leaving each chunk `[B, N, H, K, V]` and dv_new `[B, Tp, H, V]`, both stored in dtype `store`
    (fla stores them in the inputs' dtype), dS_0 fp32). The recurrence itself runs in fp32.
    """
    b_, tp, heads, dk = k.shape
    dv = do.shape[-1]
    # fla's bwd_dhu tiling (H200, B = 4, T = 4096, H = 6, V = 512): 0.82 ms in the fwd+bwd profile against 1.02 for
    # 64-wide slabs at 8 warps with k's decay on its [C, K] tile (k straight into its dot asks too much memory there)
    bv, options = _tiling(dv, k.dtype, config, warps=4, width=32)
    n_chunks = tp // chunk
    ks = pl.ds(0, dk)
    dtype = k.dtype

    def kernel(q_ref, k_ref, w_ref, do_ref, dvl_ref, fr_ref, fw_ref, d_ref, df_ref, dh_ref, dvn_ref, dh0_ref):
        vt = pl.program_id(0)
        b, h = batch_head(1, heads)
        vs = pl.ds(vt * bv, bv)

        def step(i, dS):
            n = n_chunks - 1 - i
            t0 = n * chunk
            rows = pl.ds(t0, chunk)
            dh_ref[b, n, h, ks, vs] = dS.astype(dh_ref.dtype)
            # k and w feed their dots as loaded (software-pipelined into shared memory), k's decay on the [C, BV]
            # result as fla's bwd_dhu; q's on its [C, K] tile: with q loaded so too (bf16, K = 256, two stages)
            # the kernel asked for 271 KB, and with k so at 64-wide slabs for 246,788 bytes (an H200 block: 227 KB)
            k_end = fw_ref[b, rows, h][:, None]
            dv_new = dvl_ref[b, rows, h, vs] + dot(k_ref[b, rows, h, ks], dS.astype(dtype)) * k_end
            dvn_ref[b, rows, h, vs] = dv_new.astype(dvn_ref.dtype)
            qe = (tile(q_ref, b, rows, h, ks) * fr_ref[b, rows, h][:, None]).astype(dtype)
            w_t = w_ref[b, rows, h, ks]
            decay = jnp.reshape(d_ref[b, pl.ds(n, 1), h], (1, 1))
            return (dS * decay + scale * dot(qe, do_ref[b, rows, h, vs], trans_a=True)
                    - dot(w_t, dv_new.astype(w_t.dtype), trans_a=True))

        dh0_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, df_ref[b, h, ks, vs].astype(f32))

    outs = (jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store), jax.ShapeDtypeStruct(do.shape, store),
            jax.ShapeDtypeStruct((b_, heads, dk, dv), f32))
    return launch(kernel, outs, (dv // bv, b_ * heads), interpret=interpret, config=config, name="delta_dstates",
                  **options)(q, k, w, do, dv_local, read, write, decay, dfinal)


def delta_dqkwg(q, k, v_new, do, dv_new, g, dscores, reads, writes, keep, states, dstates, *, chunk, scale,
                interpret, config=DEFAULT_CONFIG):
    """The per-chunk gradients of the gated delta rule besides the WY/UT algebra's (fla's `chunk_bwd_dqkwg`).

    Given the states entering each chunk S_n and the gradients of those leaving it dS_n (`[B, N, H, K, V]`),
    v_new and its gradient dv_new, and dscores (`chunk_dscores` of do and v_new): per chunk
      dq = scale (do S_n^T) exp(G) reads + D k,   dk = (v_new dS_n^T) exp(G_last - G) writes + D^T q,
      dw = -(dv_new S_n^T)  (the cotangent of w, for `delta_wy.wy_gradient`),
    with D = dscores exp(G_i - G_j), and the gradient of the in-chunk cumsum G,
      dG_t = sum_k (q dq - k dk)_tk, plus at the chunk's last token sum_tk (k dk)'s state part
             + exp(G_last) keep sum(S_n dS_n).
    Returns (dq in q's dtype, dk fp32, dw in k's dtype, dG fp32 [B, Tp, H]). Programs split K into tiles; each writes
    its tile's share of dG, summed here.
    """
    b_, tp, heads, dk = q.shape
    dv = do.shape[-1]
    bk, bv = config.block(dk), config.block(dv)
    n_k = dk // bk
    dtype = q.dtype

    def kernel(q_ref, k_ref, vn_ref, do_ref, dvn_ref, g_ref, da_ref, r_ref, w_ref, keep_ref, hs_ref, dh_ref,
               dq_ref, dk_ref, dw_ref, dg_ref):
        kt, n = pl.program_id(0), pl.program_id(1)
        b, h = batch_head(2, heads)
        t0 = n * chunk
        rows, ks = pl.ds(t0, chunk), pl.ds(kt * bk, bk)

        def v_step(vt, carry):  # the products with the states, a V slab at a time
            dq_s, dw_s, dk_s, sds = carry
            vs = pl.ds(vt * bv, bv)
            S, dS = hs_ref[b, n, h, ks, vs], dh_ref[b, n, h, ks, vs]
            return (dq_s + dot(do_ref[b, rows, h, vs], S.astype(dtype), trans_b=True),
                    dw_s + dot(dvn_ref[b, rows, h, vs], S.astype(dtype), trans_b=True),
                    dk_s + dot(vn_ref[b, rows, h, vs], dS.astype(dtype), trans_b=True),
                    sds + jnp.sum(S.astype(f32) * dS.astype(f32), axis=1))

        zeros = lambda *shape: jnp.zeros(shape, f32)
        dq_s, dw_s, dk_s, sds = jax.lax.fori_loop(0, dv // bv, v_step, (zeros(chunk, bk), zeros(chunk, bk),
                                                                          zeros(chunk, bk), zeros(bk)))
        dw_ref[b, rows, h, ks] = (-dw_s).astype(dw_ref.dtype)
        G, G_last = gate_tile(g_ref, "head", b, rows, h, ks), gate_row(g_ref, "head", b, t0 + chunk - 1, h, ks)
        dq = dq_s * (scale * from_start(G, r_ref[b, rows]))
        dk_ = dk_s * to_end(G, G_last, w_ref[b, rows])
        kf, qf = tile(k_ref, b, rows, h, ks), tile(q_ref, b, rows, h, ks)
        state_share = jnp.sum(kf * dk_) + jnp.sum(sds) * chunk_decay(G_last, keep_ref[b, pl.ds(n, 1)])[0]
        i = iota(chunk)
        D = (da_ref[b, h, rows, :] * masked_exp(G - G[:, 0][None, :], i[:, None] >= i[None, :])).astype(dtype)
        dq += dot(D, k_ref[b, rows, h, ks])
        dk_ += dot(D, q_ref[b, rows, h, ks], trans_a=True)
        dq_ref[b, rows, h, ks] = dq.astype(dq_ref.dtype)
        dk_ref[b, rows, h, ks] = dk_
        dG = jnp.sum(qf * dq - kf * dk_, axis=1)
        dg_ref[kt, b, rows, h] = dG + jnp.where(i == chunk - 1, state_share, 0.0)

    grad = jax.ShapeDtypeStruct(q.shape, f32)
    outs = (jax.ShapeDtypeStruct(q.shape, dtype), grad, jax.ShapeDtypeStruct(k.shape, k.dtype),
            jax.ShapeDtypeStruct((n_k, b_, tp, heads), f32))
    # 3 stages (the next V slab's loads in flight): 0.459 -> 0.397 ms alone on the H200 (B = 4, T = 4096, H = 6)
    dq, dk_, dw, dG = launch(kernel, outs, (n_k, tp // chunk, b_ * heads), interpret=interpret, config=config,
                             num_stages=3,
                             name="delta_dqkwg")(q, k, v_new, do, dv_new, g, dscores, reads, writes, keep, states,
                                                 dstates)
    return dq, dk_, dw, jnp.sum(dG, axis=0)
