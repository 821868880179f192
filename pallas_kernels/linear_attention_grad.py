"""The backward kernels of the chunked linear attention (`linear_attention`'s layouts and gate modes).

  chunk_dscores dA = scale (do y^T) on the causal same-document pairs
  chunk_dqk     dq, dk (and dg for per-channel gates) of the GLA form from dA, the states and
                their gradients (the diagonal 16-blocks of dA come from `diagonal_dqk`)
  diagonal_dqk  dq, dk through the diagonal 16-blocks of dA, exact pairwise decays, and the gated q and k
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import (DEFAULT_CONFIG, HALF, SUB, batch_head, chunk_decay, dot, from_start, gate_row,
                                  gate_tile, iota, launch, masked_exp, same_doc_causal, split_gate,
                                  store_gated_tiles, tile, to_end)

f32 = jnp.float32


def chunk_dscores(do, y, dd, *, chunk, scale, interpret, config=DEFAULT_CONFIG):
    """dA = scale * do @ y^T on the causal same-document pairs of each chunk: [B, H, Tp, C] fp32."""
    b_, tp, heads, dv = do.shape
    bv = config.block(dv)

    def kernel(do_ref, y_ref, dd_ref, da_ref):
        n = pl.program_id(0)
        b, h = batch_head(1, heads)
        rows = pl.ds(n * chunk, chunk)

        def v_step(vt, acc):
            vs = pl.ds(vt * bv, bv)
            return acc + dot(do_ref[b, rows, h, vs], y_ref[b, rows, h, vs], trans_b=True)

        acc = jax.lax.fori_loop(0, dv // bv, v_step, jnp.zeros((chunk, chunk), f32))
        da_ref[b, h, rows, :] = jnp.where(same_doc_causal(dd_ref, b, rows, chunk), scale * acc, 0.0)

    out = jax.ShapeDtypeStruct((b_, heads, tp, chunk), f32)
    return launch(kernel, out, (tp // chunk, b_ * heads), interpret=interpret, config=config,
                  name="chunk_dscores")(do, y, dd)


def chunk_dqk(q, k, v, do, g, reads, writes, keep, states, dstates, dscores, diagonal, *, chunk, gate, scale,
              interpret, config=DEFAULT_CONFIG, dq_rest=None, scores=None):
    """Gradients of the GLA form (per-channel gates or none) with respect to q, k and (gated) g.

    states: the state entering each chunk; dstates: the gradient of the state leaving it (both
    `[B, N, H, K, V]`, in q's dtype or fp32: the dots take them in q's dtype); dscores: `chunk_dscores`
    of (do, v); diagonal: `diagonal_dqk`'s (dq, dk) with per-channel gates, None without; dq_rest (`[B, Tp, H, K]`
    or None): a share of dq from elsewhere, added on chip in fp32. scores (no gates, v the keys themselves: the CCQ
    covariance): `intra_scores`' A; dk then holds v's gradient too, writes (k dS_n) + scale A^T do, instead of
    `chunk_out` forming it apart. Returns (dq, dk in q's dtype, dg fp32 or None); dg is the gradient of the raw
    log gates (the in-chunk reverse cumsum of dG).
    """
    b_, tp, heads, dk = q.shape
    dv = v.shape[-1]
    shared = scores is not None
    if shared and (gate or dv != dk):
        raise ValueError(f"chunk_dqk: scores (v the keys) need no gates and v's width equal to k's, got gate={gate!r}, "
                         f"K={dk}, V={dv}")
    # gated: narrow K tiles (many [C, BK] fp32 tiles stay live), 2x fewer V steps; ungated, where few do: 64 x 64
    # (the CCQ covariance, H200, B = 4, T = 4096: 0.14-0.21 ms against 0.18-0.28 at 32 x 128)
    bk, bv = (config.block(dk, 32), config.block(dv, 128)) if gate else (config.block(dk), config.block(dv))
    subs = chunk // SUB
    dtype = q.dtype

    def kernel(q_ref, k_ref, v_ref, do_ref, *refs):
        g_ref, refs = split_gate(refs, gate)
        r_ref, w_ref, keep_ref, hs_ref, dh_ref, da_ref, *refs = refs
        dqd_ref, dkd_ref, *refs = refs if gate else (None, None, *refs)
        dqr_ref, *refs = refs if dq_rest is not None else (None, *refs)
        a_ref, *refs = refs if shared else (None, *refs)
        dq_ref, dk_ref, *dg_ref = refs
        kt, n = pl.program_id(0), pl.program_id(1)
        b, h = batch_head(2, heads)
        t0 = n * chunk
        rows, ks = pl.ds(t0, chunk), pl.ds(kt * bk, bk)

        def v_step(vt, carry):
            dq, dk_, dgl = carry
            vs = pl.ds(vt * bv, bv)
            S, dS = hs_ref[b, n, h, ks, vs], dh_ref[b, n, h, ks, vs]
            dq += dot(do_ref[b, rows, h, vs], S.astype(dtype), trans_b=True)
            dk_ += dot(v_ref[b, rows, h, vs], dS.astype(dtype), trans_b=True)
            if shared:  # v's gradient at columns ks, (k dS)[:, ks]: k's tile vs (k is v) against dS's [vs, ks]
                dk_ += dot(v_ref[b, rows, h, vs], dh_ref[b, n, h, vs, ks].astype(dtype))
            if gate:
                dgl += jnp.sum(S.astype(f32) * dS.astype(f32), axis=1)
            return dq, dk_, dgl

        zeros = lambda *shape: jnp.zeros(shape, f32)
        dq, dk_, dgl = jax.lax.fori_loop(0, dv // bv, v_step, (zeros(chunk, bk), zeros(chunk, bk), zeros(bk)))
        G = gate_tile(g_ref, gate, b, rows, h, ks)
        G_last = gate_row(g_ref, gate, b, t0 + chunk - 1, h, ks)
        dq = dq * (scale * from_start(G, r_ref[b, rows]))
        dk_ = dk_ * to_end(G, G_last, w_ref[b, rows])
        qf, kf = tile(q_ref, b, rows, h, ks), tile(k_ref, b, rows, h, ks)
        dA = da_ref[b, h, rows, :]
        if not gate:
            dq += dot(dA.astype(dtype), kf.astype(dtype))
            dk_ += dot(dA.astype(dtype), qf.astype(dtype), trans_a=True)
            if shared:
                dk_ += scale * dot(a_ref[b, h, rows, :].astype(dtype), do_ref[b, rows, h, ks], trans_a=True)
        else:
            dgl = dgl * chunk_decay(G_last, keep_ref[b, pl.ds(n, 1)]) + jnp.sum(kf * dk_, axis=0)
            i = iota(chunk)
            blk = i // SUB
            for a in range(1, subs):  # query sub-block a against all earlier keys
                rho = g_ref[b, t0 + a * SUB - 1, h, ks][None, :]
                ka = (kf * masked_exp(rho - G, (i < a * SUB)[:, None])).astype(dtype)
                dq += masked_exp(G - rho, (blk == a)[:, None]) * dot(dA.astype(dtype), ka)
            for c in range(subs - 1):  # key sub-block c against all later queries
                rho = g_ref[b, t0 + c * SUB + SUB - 1, h, ks][None, :]
                qc = (qf * masked_exp(G - rho, (i >= (c + 1) * SUB)[:, None])).astype(dtype)
                dk_ += masked_exp(rho - G, (blk == c)[:, None]) * dot(dA.astype(dtype), qc, trans_a=True)
            dq += dqd_ref[b, rows, h, ks]  # the diagonal sub-blocks (diagonal_dqk)
            dk_ += dkd_ref[b, rows, h, ks]
            dG = qf * dq - kf * dk_ + jnp.where((i == chunk - 1)[:, None], dgl[None, :], 0.0)
            # the sum over the later tokens of the chunk (Triton has no reverse cumsum): 0.715 -> 0.634 ms on the
            # H200 (B = 4, T = 4096) against a product with the [C, C] upper triangle, an IEEE fp32 dot
            dg_ref[0][b, rows, h, ks] = jnp.sum(dG, axis=0, keepdims=True) - jnp.cumsum(dG, axis=0) + dG
        if dqr_ref is not None:
            dq += dqr_ref[b, rows, h, ks].astype(f32)
        dq_ref[b, rows, h, ks] = dq.astype(dq_ref.dtype)
        dk_ref[b, rows, h, ks] = dk_.astype(dk_ref.dtype)

    args = (q, k, v, do) + ((g,) if gate else ()) + (reads, writes, keep, states, dstates, dscores) + (diagonal or ())
    args += ((dq_rest,) if dq_rest is not None else ()) + ((scores,) if shared else ())
    grad = jax.ShapeDtypeStruct(q.shape, dtype)
    outs = (grad, grad) + ((jax.ShapeDtypeStruct(q.shape, f32),) if gate == "channel" else ())
    res = launch(kernel, outs, (dk // bk, tp // chunk, b_ * heads), interpret=interpret, config=config,
                 name="chunk_dqk")(*args)
    return res[0], res[1], (res[2] if gate == "channel" else None)


def _halves(s):
    """(the 16-block's top and bottom halves as row slices, the reference token: the top's last)."""
    t0 = s * SUB
    return pl.ds(t0, HALF), pl.ds(t0 + HALF, HALF), t0 + HALF - 1


def diagonal_dqk(q, k, g, dscores, reads, writes, *, chunk, interpret, config=DEFAULT_CONFIG):
    """dq, dk ([B, Tp, H, K] fp32) of each token through the diagonal SUB x SUB block of dA holding it, and from
    the same tiles the backward's gated q exp(G) reads and k exp(G_last - G) writes (as `gated_inputs`'):
    (dq, dk, gated q, gated k).

    One program per (K tile, 16-token block): dq_i = sum_{j<=i} dA_ij k_j exp(G_i - G_j), dk_j = sum_{i>=j}
    dA_ij q_i exp(G_i - G_j); inside each 8-token half on [8, 8, BK] tiles with the exact pairwise decay, the
    bottom queries against the top keys through the top's last token r: exp(G_i - G_j) = e_i f_j with
    e = exp(G - G_r) (bottom) and f = exp(G_r - G) (top), both exponents <= 0 (G does not increase), so nothing
    overflows: dq_i += e_i sum_j dA_ij k_j f_j and dk_j += f_j sum_i dA_ij q_i e_i. Measured on the H200 at 2
    warps (B=4, T=4096, H=4, K=256): 0.18 ms against 0.29 with all pairs exact on [16, 16, BK] tiles (0.27 at 2
    warps); `diagonal_scores` did not gain from the same halves (0.220 against 0.212).
    """
    b_, tp, heads, dk = q.shape
    bk = config.block(dk, 32)
    subs = chunk // SUB

    def kernel(q_ref, k_ref, g_ref, da_ref, r_ref, w_ref, dq_ref, dk_ref, q_out, k_out):
        kt, s = pl.program_id(0), pl.program_id(1)
        b, h = batch_head(2, heads)
        top, bottom, r = _halves(s)
        ks, c0 = pl.ds(kt * bk, bk), (s % subs) * SUB
        i = iota(HALF)
        lower = (i[:, None] >= i[None, :])[:, :, None]
        G_last = g_ref[b, (s // subs) * chunk + chunk - 1, h, ks]
        gr = g_ref[b, r, h, ks][None, :]

        def half(rows, c):  # the pairs inside one half, exact: (G, q, k, dq, dk) on its tiles
            G, qf, kf = g_ref[b, rows, h, ks], tile(q_ref, b, rows, h, ks), tile(k_ref, b, rows, h, ks)
            weighted = da_ref[b, h, rows, pl.ds(c, HALF)][:, :, None] * masked_exp(G[:, None, :] - G[None, :, :],
                                                                                   lower)  # [query, key, BK]
            store_gated_tiles(qf, kf, G, G_last, r_ref[b, rows], w_ref[b, rows], q_out, k_out, (b, rows, h, ks))
            return G, qf, kf, jnp.sum(weighted * kf[None, :, :], axis=1), jnp.sum(weighted * qf[:, None, :], axis=0)

        G_top, _, k_top, dq_top, dk_top = half(top, c0)
        G_bottom, q_bottom, _, dq_bottom, dk_bottom = half(bottom, c0 + HALF)
        e, f = jnp.exp(G_bottom - gr), jnp.exp(gr - G_top)
        dA = da_ref[b, h, bottom, pl.ds(c0, HALF)][:, :, None]  # the bottom queries against the top keys
        dq_bottom += e * jnp.sum(dA * (k_top * f)[None, :, :], axis=1)
        dk_top += f * jnp.sum(dA * (q_bottom * e)[:, None, :], axis=0)
        for rows, dq, dk_ in ((top, dq_top, dk_top), (bottom, dq_bottom, dk_bottom)):
            dq_ref[b, rows, h, ks] = dq
            dk_ref[b, rows, h, ks] = dk_

    grad = jax.ShapeDtypeStruct(q.shape, f32)
    outs = (grad, grad, jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(k.shape, k.dtype))
    return tuple(launch(kernel, outs, (dk // bk, tp // SUB, b_ * heads), interpret=interpret, config=config,
                        num_warps=2,
                        name="diagonal_dqk")(q, k, g, dscores, reads, writes))


__all__ = ["chunk_dqk", "chunk_dscores", "diagonal_dqk"]
