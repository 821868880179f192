"""Chunked linear attention kernels (fla's decomposition), shared by GLA, the gated delta rule and the CCQ read.

Layouts (padded by the caller): tokens `[B, Tp, H, D]` with Tp = N * C; per-token 0/1 masks
`[B, Tp]` fp32 (`reads`: the token belongs to the document of the state entering its chunk;
`writes`: it is real and in its chunk's last document) and a per-chunk one `keep` `[B, N]` (no
document starts inside the chunk); the monotone document index `dd [B, Tp]` int32;
per-chunk states `[B, N, H, K, V]`; intra-chunk score matrices `[B, H, Tp, C]` (row i of chunk
n holds token i's scores against the C tokens of its chunk). See `_tiles` for the gate modes.

The pieces:
  gated_inputs  G, the in-chunk cumsum of per-channel log gates, and q, k with their factors applied
  intra_scores  A_ij = sum_k q_ik k_jk exp(G_ik - G_jk) for j <= i in one document (per-channel
                gates by secondary chunking: off-diagonal 16-blocks factor through a reference
                row so that every exponent is <= 0; `diagonal_scores` fills the diagonal blocks
                with the exact pairwise decay, one program per 16-token block)
  chunk_states  S <- exp(G_last) keep S + scale (x * f)^T y, chunk by chunk (or from the end),
                optionally storing the state entering every chunk (per-channel gates: x * f
                from `gated_inputs`)
  chunk_out     out = s_inter (x * f) S_n + s_intra A y   (A or A^T; gates per head or none:
                per-channel ones are applied to x beforehand)
  chunk_dscores dA = scale (do y^T) on the causal same-document pairs
  chunk_dqk     dq, dk (and dg for per-channel gates) of the GLA form from dA, the states and
                their gradients (the diagonal 16-blocks of dA come from `diagonal_dqk`)
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels._tiles import (HALF, SUB, batch_head, chunk_decay, dot, from_start, gate_row, gate_tile, iota,
                                   launch, masked_exp, same_doc_causal, tile, to_end)

f32 = jnp.float32


def block(d, cap=64):
    """Tile width along a feature axis (d is a power of two >= 16)."""
    return min(d, cap)


def _split_gate(refs, gate):
    refs = list(refs)
    return (refs.pop(0) if gate else None), refs


def _gated_tiles(qf, kf, G, G_last, reads, writes, q_out, k_out, at):
    """Stores q exp(G) reads and k exp(G_last - G) writes of fp32 tiles at `at` (b, rows, h, ks)."""
    q_out[at] = (qf * from_start(G, reads)).astype(q_out.dtype)
    k_out[at] = (kf * to_end(G, G_last, writes)).astype(k_out.dtype)


def gated_inputs(g, q, k, reads, writes, *, chunk, interpret):
    """Per-channel gates applied once: (G, q exp(G) reads, k exp(G_last - G) writes), the last two in q's and k's
    dtype (the dots take them so), for the passes that read q against the state entering a chunk (`chunk_out`,
    the reverse `chunk_states`) or write k into the state leaving it (`chunk_states`, dv's `chunk_out`), where
    fla applies the gates inside each of those kernels, sequential loops included; G [B, Tp, H, K] fp32 is the
    inclusive cumsum of the raw log gates g inside each chunk (fla's `chunk_local_cumsum`). One program per
    chunk, head and K tile. The backward's gated q and k come from `diagonal_dqk`, which loads their tiles anyway."""
    b_, tp, heads, dk = g.shape
    bk = block(dk)

    def kernel(g_ref, q_ref, k_ref, r_ref, w_ref, g_out, q_out, k_out):
        n, kt = pl.program_id(0), pl.program_id(2)
        b, h = batch_head(1, heads)
        rows, ks = pl.ds(n * chunk, chunk), pl.ds(kt * bk, bk)
        G = jnp.cumsum(g_ref[b, rows, h, ks].astype(f32), axis=0)
        g_out[b, rows, h, ks] = G
        G_last = jnp.sum(jnp.where((iota(chunk) == chunk - 1)[:, None], G, 0.0), axis=0)  # the last row, exactly
        _gated_tiles(tile(q_ref, b, rows, h, ks), tile(k_ref, b, rows, h, ks), G, G_last, r_ref[b, rows],
                     w_ref[b, rows], q_out, k_out, (b, rows, h, ks))

    outs = (jax.ShapeDtypeStruct(g.shape, f32), jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct(k.shape, k.dtype))
    return tuple(launch(kernel, outs, (tp // chunk, b_ * heads, dk // bk), interpret=interpret,
                        name="gated_inputs")(g, q, k, reads, writes))


def intra_scores(q, k, g, dd, *, chunk, gate, interpret, key_sums=False):
    """[B, H, Tp, C] fp32 scores of each token against the earlier tokens of its chunk and document. key_sums (no
    gates): also the running sums of the keys over the same pairs, sum_{j <= i} k_j, [B, Tp, H, K] in k's dtype
    (the CCQ read's m^), formed from the key tiles the scores load."""
    if key_sums and gate:
        raise ValueError(f"intra_scores: key_sums is for ungated attention, got gate={gate!r}")
    b_, tp, heads, dk = q.shape
    bk = block(dk)
    subs = chunk // SUB

    def kernel(q_ref, k_ref, *refs):
        g_ref, (dd_ref, a_ref, *sums_ref) = _split_gate(refs, gate)
        n = pl.program_id(0)
        b, h = batch_head(1, heads)
        t0 = n * chunk
        rows = pl.ds(t0, chunk)
        i = iota(chunk)
        causal = same_doc_causal(dd_ref, b, rows, chunk)
        pairs = causal.astype(k.dtype) if key_sums else None  # 0/1: the key sums' products are exact in any dtype

        def k_step(kt, acc):
            ks = pl.ds(kt * bk, bk)
            qt, kt_ = q_ref[b, rows, h, ks], k_ref[b, rows, h, ks]
            if key_sums:
                sums_ref[0][b, rows, h, ks] = dot(pairs, kt_).astype(kt_.dtype)
            if gate != "channel":
                return acc + dot(qt, kt_, trans_b=True)
            qf, kf, G = qt.astype(f32), kt_.astype(f32), g_ref[b, rows, h, ks]
            for a in range(1, subs):  # query sub-block a against all earlier keys, through G just before a
                rho = g_ref[b, t0 + a * SUB - 1, h, ks][None, :]
                qa = qf * masked_exp(G - rho, (i // SUB == a)[:, None])
                ka = kf * masked_exp(rho - G, (i < a * SUB)[:, None])
                acc += dot(qa.astype(qt.dtype), ka.astype(qt.dtype), trans_b=True)
            return acc

        acc = jax.lax.fori_loop(0, dk // bk, k_step, jnp.zeros((chunk, chunk), f32))
        if gate == "head":
            G = g_ref[b, rows, h]
            acc = acc * masked_exp(G[:, None] - G[None, :], causal)
        a_ref[b, h, rows, :] = jnp.where(causal, acc, 0.0)

    args = (q, k) + ((g,) if gate else ()) + (dd,)
    out = (jax.ShapeDtypeStruct((b_, heads, tp, chunk), f32),) + ((jax.ShapeDtypeStruct(k.shape, k.dtype),)
                                                                  if key_sums else ())
    res = launch(kernel, out, (tp // chunk, b_ * heads), interpret=interpret, name="intra_scores")(*args)
    return tuple(res) if key_sums else res[0]


def diagonal_scores(q, k, g, dd, scores, *, chunk, interpret):
    """Fills the diagonal SUB x SUB blocks of `intra_scores`'s per-channel-gate scores (left zero there), in place.

    One program per 16-token sub-block, a column (key j) at a time on [SUB, BK] tiles: A_ij = sum_k q_ik
    k_jk exp(G_ik - G_jk) for j <= i, with the exact pairwise decay (every exponent <= 0, nothing
    overflows). Measured on the H200, this beats forming the [SUB, SUB, BK] products at once
    (0.22 vs 0.40 ms at B=4, T=4096, H=4, K=256), while `diagonal_dqk` is faster the other way.
    """
    b_, tp, heads, dk = q.shape
    bk = block(dk, 32)
    subs = chunk // SUB

    def kernel(q_ref, k_ref, g_ref, dd_ref, _, a_ref):
        s = pl.program_id(0)
        b, h = batch_head(1, heads)
        rows = pl.ds(s * SUB, SUB)
        i = iota(SUB)
        kss = [pl.ds(kt * bk, bk) for kt in range(dk // bk)]
        tiles = [(tile(q_ref, b, rows, h, ks), g_ref[b, rows, h, ks]) for ks in kss]

        def column(j, acc):  # the scores of the sub-block's queries against its key j
            t = s * SUB + j
            terms = jnp.zeros((SUB, bk), f32)  # summed over the K tiles first: one cross-lane reduction per key
            for (q, G), ks in zip(tiles, kss):
                kj, gj = k_ref[b, t, h, ks].astype(f32)[None, :], g_ref[b, t, h, ks][None, :]
                terms += q * kj * masked_exp(G - gj, (i >= j)[:, None])
            return jnp.where(i[None, :] == j, jnp.sum(terms, axis=1)[:, None], acc)

        acc = jax.lax.fori_loop(0, SUB, column, jnp.zeros((SUB, SUB), f32))
        causal = same_doc_causal(dd_ref, b, rows, SUB)
        a_ref[b, h, rows, pl.ds((s % subs) * SUB, SUB)] = jnp.where(causal, acc, 0.0)

    out = jax.ShapeDtypeStruct(scores.shape, f32)
    return launch(kernel, out, (tp // SUB, b_ * heads), interpret=interpret, aliases={4: 0},
                  name="diagonal_scores")(q, k, g, dd, scores)


def chunk_states(x, y, g, mask, keep, h0, *, chunk, gate, reverse=False, scale=1.0, store=None, interpret):
    """The state pass: S <- decay S + scale x^T y chunk by chunk (from the end with reverse=True, the backward
    pass of the state gradient). Per-channel gates: x carries its in-chunk factor already (`gated_inputs`: keys
    decayed to their chunk's end, or queries from its start), g (G) gives the chunk decay exp(G_last) keep, and
    mask is None; no gates: mask scales the rows of y and the decay is keep, both fp32, per token `[B, Tp]` and
    per chunk `[B, N]` (0/1), or per head as well, `[B, Tp, H]` and `[B, N, H]` (the gated delta rule's states
    from its v_new: its factors exp(G_last - G) writes and exp(G_last) keep).

    Returns (the state entering each step `[B, N, H, K, V]` in dtype `store`, or None; the final state fp32).
    """
    if gate == "head":
        raise ValueError("chunk_states: gates per channel or none (the gated delta rule's per-head factors go in "
                         "as mask and keep)")
    b_, tp, heads, dk = x.shape
    dv = y.shape[-1]
    # 64-wide tiles, 4 warps, 3 stages (the next chunk's loads in flight): GLA (prescaled keys) 0.144 ms against
    # 0.177 at 128 / 8 / 2 and 0.163 at 64 / 4 / 2; the CCQ covariance 0.091 against 0.112 at 64 / 4 / 2
    # (H200, B = 4, T = 4096)
    bk, bv = block(dk), block(dv)
    n_chunks = tp // chunk

    def kernel(x_ref, y_ref, *refs):
        g_ref, refs = _split_gate(refs, gate)
        m_ref, refs = (refs[0], refs[1:]) if gate is None else (None, refs)
        keep_ref, h0_ref, *outs = refs
        hs_ref = outs.pop(0) if store else None
        (ht_ref,) = outs
        kt, vt = pl.program_id(0), pl.program_id(1)
        b, h = batch_head(2, heads)
        ks, vs = pl.ds(kt * bk, bk), pl.ds(vt * bv, bv)
        head_slice = lambda ref, at: ref[b, at] if len(ref.shape) == 2 else ref[b, at, h]  # shared, or per head

        chunk_at = lambda i: jnp.maximum(n_chunks - 1 - i, 0) if reverse else jnp.minimum(i, n_chunks - 1)

        def contribution(n):
            """(decay [BK, 1], scale x^T y [BK, BV]) of chunk n: what the state does not enter."""
            t0 = n * chunk
            rows = pl.ds(t0, chunk)
            y = y_ref[b, rows, h, vs]
            if m_ref is not None:  # a per-token factor: on y's rows, so that x enters the dot as loaded
                y = (y.astype(f32) * head_slice(m_ref, rows)[:, None]).astype(y.dtype)
            update = scale * dot(x_ref[b, rows, h, ks], y, trans_a=True)
            G_last = gate_row(g_ref, gate, b, t0 + chunk - 1, h, ks)
            return jnp.reshape(chunk_decay(G_last, head_slice(keep_ref, pl.ds(n, 1))), (-1, 1)), update

        def step(i, carry):  # chunk i+1's loads and dot are issued before chunk i's state update needs its own
            S, decay, update = carry
            if hs_ref is not None:
                hs_ref[b, chunk_at(i), h, ks, vs] = S.astype(hs_ref.dtype)
            nxt = contribution(chunk_at(i + 1))  # past the last chunk: the last again, never used
            return (S * decay + update, *nxt)

        init = (h0_ref[b, h, ks, vs].astype(f32), *contribution(chunk_at(0)))
        ht_ref[b, h, ks, vs] = jax.lax.fori_loop(0, n_chunks, step, init)[0]

    args = (x, y) + ((g,) if gate else (mask,)) + (keep, h0)
    final = jax.ShapeDtypeStruct((b_, heads, dk, dv), f32)
    outs = ((jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store),) if store else ()) + (final,)
    res = launch(kernel, outs, (dk // bk, dv // bv, b_ * heads), interpret=interpret, num_stages=3,
                 name="chunk_states")(*args)
    return (res[0], res[1]) if store else (None, res[0])


def chunk_out(x, g, mask, states, scores, y, *, chunk, gate, transpose_scores, s_inter, s_intra, out_dtype,
              interpret):
    """Per chunk n: out = s_inter (x * f) @ states_n + s_intra A @ y (A^T with transpose_scores); [B, Tp, H, V].

    f scales x's rows: exp(G) mask with gates per head (queries against the state entering their chunk), mask
    without gates (per-channel gates are applied to x beforehand: `gated_inputs`). With states=None only the
    intra-chunk term is formed (x, g and mask are then unused).
    """
    if gate == "channel":
        raise ValueError("chunk_out: per-channel gates are applied to x beforehand (gated_inputs)")
    b_, tp, heads, dk = x.shape
    dv = y.shape[-1]
    bk, bv = block(dk), block(dv)
    inter = states is not None

    def kernel(*refs):
        if inter:
            x_ref, *refs = refs
            g_ref, (m_ref, hs_ref, *refs) = _split_gate(refs, gate)
        a_ref, y_ref, o_ref = refs
        vt, n = pl.program_id(0), pl.program_id(1)
        b, h = batch_head(2, heads)
        rows, vs = pl.ds(n * chunk, chunk), pl.ds(vt * bv, bv)
        out = s_intra * dot(a_ref[b, h, rows, :].astype(y_ref.dtype), y_ref[b, rows, h, vs],
                            trans_a=transpose_scores)
        if inter:
            def k_step(kt, acc):  # a loop, not unrolled: Triton pipelines its loads (num_stages)
                ks = pl.ds(kt * bk, bk)
                return acc + dot(x_ref[b, rows, h, ks], hs_ref[b, n, h, ks, vs].astype(x_ref.dtype))

            acc = jax.lax.fori_loop(0, dk // bk, k_step, jnp.zeros((chunk, bv), f32))
            # the per-token factor scales the rows of the whole product, once
            out = out + s_inter * acc * from_start(gate_tile(g_ref, gate, b, rows, h, None), m_ref[b, rows])
        o_ref[b, rows, h, vs] = out.astype(o_ref.dtype)

    args = ((x,) + ((g,) if gate else ()) + (mask, states) if inter else ()) + (scores, y)
    out = jax.ShapeDtypeStruct((b_, tp, heads, dv), out_dtype)
    # 3 stages pipeline the K loop's loads: GLA 0.38 -> 0.34 ms on the H200 (B=4, T=4096, H=4, K=256, V=512)
    return launch(kernel, out, (dv // bv, tp // chunk, b_ * heads), interpret=interpret, num_stages=3,
                  name="chunk_out")(*args)


def chunk_dscores(do, y, dd, *, chunk, scale, interpret):
    """dA = scale * do @ y^T on the causal same-document pairs of each chunk: [B, H, Tp, C] fp32."""
    b_, tp, heads, dv = do.shape
    bv = block(dv)

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
    return launch(kernel, out, (tp // chunk, b_ * heads), interpret=interpret, name="chunk_dscores")(do, y, dd)


def chunk_dqk(q, k, v, do, g, reads, writes, keep, states, dstates, dscores, diagonal, *, chunk, gate, scale,
              interpret, dq_rest=None, scores=None):
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
    bk, bv = (block(dk, 32), block(dv, 128)) if gate else (block(dk), block(dv))
    subs = chunk // SUB
    dtype = q.dtype

    def kernel(q_ref, k_ref, v_ref, do_ref, *refs):
        g_ref, refs = _split_gate(refs, gate)
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
    res = launch(kernel, outs, (dk // bk, tp // chunk, b_ * heads), interpret=interpret, name="chunk_dqk")(*args)
    return res[0], res[1], (res[2] if gate == "channel" else None)


def _halves(s):
    """(the 16-block's top and bottom halves as row slices, the reference token: the top's last)."""
    t0 = s * SUB
    return pl.ds(t0, HALF), pl.ds(t0 + HALF, HALF), t0 + HALF - 1


def diagonal_dqk(q, k, g, dscores, reads, writes, *, chunk, interpret):
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
    bk = block(dk, 32)
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
            _gated_tiles(qf, kf, G, G_last, r_ref[b, rows], w_ref[b, rows], q_out, k_out, (b, rows, h, ks))
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
    return tuple(launch(kernel, outs, (dk // bk, tp // SUB, b_ * heads), interpret=interpret, num_warps=2,
                        name="diagonal_dqk")(q, k, g, dscores, reads, writes))


__all__ = ["block", "chunk_dqk", "chunk_dscores", "chunk_out", "chunk_states", "diagonal_dqk", "diagonal_scores",
           "intra_scores"]
