"""Chunked linear attention kernels (fla's decomposition), shared by GLA, the gated delta rule and the CCQ read.

Layouts (padded by the caller): tokens `[B, Tp, H, D]` with Tp = N * C; per-token 0/1 masks
`[B, Tp]` fp32 (`reads`: the token belongs to the document of the state entering its chunk;
`writes`: it is real and in its chunk's last document) and a per-chunk one `keep` `[B, N]` (no
document starts inside the chunk); the monotone document index `dd [B, Tp]` int32;
per-chunk states `[B, N, H, K, V]`; intra-chunk score matrices `[B, H, Tp, C]` (row i of chunk
n holds token i's scores against the C tokens of its chunk). See `tiles` for the gate modes.

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
The backward's own kernels (chunk_dscores, chunk_dqk, diagonal_dqk) are in `linear_attention_grad`.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import (DEFAULT_CONFIG, SUB, batch_head, chunk_decay, dot, from_start, gate_row, gate_tile,
                                  iota, launch, masked_exp, same_doc_causal, split_gate, store_gated_tiles, tile)

f32 = jnp.float32


def gated_inputs(g, q, k, reads, writes, *, chunk, interpret, config=DEFAULT_CONFIG):
    """Per-channel gates applied once: (G, q exp(G) reads, k exp(G_last - G) writes), the last two in q's and k's
    dtype (the dots take them so), for the passes that read q against the state entering a chunk (`chunk_out`,
    the reverse `chunk_states`) or write k into the state leaving it (`chunk_states`, dv's `chunk_out`), where
    fla applies the gates inside each of those kernels, sequential loops included; G [B, Tp, H, K] fp32 is the
    inclusive cumsum of the raw log gates g inside each chunk (fla's `chunk_local_cumsum`). One program per
    chunk, head and K tile. The backward's gated q and k come from `diagonal_dqk`, which loads their tiles anyway."""
    b_, tp, heads, dk = g.shape
    bk = config.block(dk)

    def kernel(g_ref, q_ref, k_ref, r_ref, w_ref, g_out, q_out, k_out):
        n, kt = pl.program_id(0), pl.program_id(2)
        b, h = batch_head(1, heads)
        rows, ks = pl.ds(n * chunk, chunk), pl.ds(kt * bk, bk)
        G = jnp.cumsum(g_ref[b, rows, h, ks].astype(f32), axis=0)
        g_out[b, rows, h, ks] = G
        G_last = jnp.sum(jnp.where((iota(chunk) == chunk - 1)[:, None], G, 0.0), axis=0)  # the last row, exactly
        store_gated_tiles(tile(q_ref, b, rows, h, ks), tile(k_ref, b, rows, h, ks), G, G_last, r_ref[b, rows],
                     w_ref[b, rows], q_out, k_out, (b, rows, h, ks))

    outs = (jax.ShapeDtypeStruct(g.shape, f32), jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct(k.shape, k.dtype))
    return tuple(launch(kernel, outs, (tp // chunk, b_ * heads, dk // bk), interpret=interpret, config=config,
                        name="gated_inputs")(g, q, k, reads, writes))


def intra_scores(q, k, g, dd, *, chunk, gate, interpret, config=DEFAULT_CONFIG, key_sums=False):
    """[B, H, Tp, C] fp32 scores of each token against the earlier tokens of its chunk and document. key_sums (no
    gates): also the running sums of the keys over the same pairs, sum_{j <= i} k_j, [B, Tp, H, K] in k's dtype
    (the CCQ read's m^), formed from the key tiles the scores load."""
    if key_sums and gate:
        raise ValueError(f"intra_scores: key_sums is for ungated attention, got gate={gate!r}")
    b_, tp, heads, dk = q.shape
    bk = config.block(dk)
    subs = chunk // SUB

    def kernel(q_ref, k_ref, *refs):
        g_ref, (dd_ref, a_ref, *sums_ref) = split_gate(refs, gate)
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
    res = launch(kernel, out, (tp // chunk, b_ * heads), interpret=interpret, config=config, name="intra_scores")(*args)
    return tuple(res) if key_sums else res[0]


def diagonal_scores(q, k, g, dd, scores, *, chunk, interpret, config=DEFAULT_CONFIG):
    """Fills the diagonal SUB x SUB blocks of `intra_scores`'s per-channel-gate scores (left zero there), in place.

    One program per 16-token sub-block, a column (key j) at a time on [SUB, BK] tiles: A_ij = sum_k q_ik
    k_jk exp(G_ik - G_jk) for j <= i, with the exact pairwise decay (every exponent <= 0, nothing
    overflows). Measured on the H200, this beats forming the [SUB, SUB, BK] products at once
    (0.22 vs 0.40 ms at B=4, T=4096, H=4, K=256), while `diagonal_dqk` is faster the other way.
    """
    b_, tp, heads, dk = q.shape
    bk = config.block(dk, 32)
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
    return launch(kernel, out, (tp // SUB, b_ * heads), interpret=interpret, config=config, aliases={4: 0},
                  name="diagonal_scores")(q, k, g, dd, scores)


def chunk_states(x, y, g, mask, keep, h0, *, chunk, gate, reverse=False, scale=1.0, store=None, interpret,
                 config=DEFAULT_CONFIG):
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
    bk, bv = config.block(dk), config.block(dv)
    n_chunks = tp // chunk

    def kernel(x_ref, y_ref, *refs):
        g_ref, refs = split_gate(refs, gate)
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
    res = launch(kernel, outs, (dk // bk, dv // bv, b_ * heads), interpret=interpret, config=config, num_stages=3,
                 name="chunk_states")(*args)
    return (res[0], res[1]) if store else (None, res[0])


def chunk_out(x, g, mask, states, scores, y, *, chunk, gate, transpose_scores, s_inter, s_intra, out_dtype,
              interpret, config=DEFAULT_CONFIG):
    """Per chunk n: out = s_inter (x * f) @ states_n + s_intra A @ y (A^T with transpose_scores); [B, Tp, H, V].

    f scales x's rows: exp(G) mask with gates per head (queries against the state entering their chunk), mask
    without gates (per-channel gates are applied to x beforehand: `gated_inputs`). With states=None only the
    intra-chunk term is formed (x, g and mask are then unused).
    """
    if gate == "channel":
        raise ValueError("chunk_out: per-channel gates are applied to x beforehand (gated_inputs)")
    b_, tp, heads, dk = x.shape
    dv = y.shape[-1]
    bk, bv = config.block(dk), config.block(dv)
    inter = states is not None

    def kernel(*refs):
        if inter:
            x_ref, *refs = refs
            g_ref, (m_ref, hs_ref, *refs) = split_gate(refs, gate)
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
    return launch(kernel, out, (dv // bv, tp // chunk, b_ * heads), interpret=interpret, config=config, num_stages=3,
                  name="chunk_out")(*args)


__all__ = ["chunk_out", "chunk_states", "diagonal_scores", "gated_inputs", "intra_scores"]
