"""Chunkwise-parallel forms in plain XLA: parallel work inside chunks, one sequential pass across them.

The sequence is padded to a multiple of the chunk length C and viewed as N chunks. Each op
splits into (1) per-chunk gate cumsums in fp32, (2) chunk-local work done for all chunks at
once (intra-chunk scores, the chunk's contribution to the state), (3) one `lax.scan` over
chunks that only carries the fp32 state across chunk boundaries, and (4) the output, again
for all chunks at once. docs/design.md derives each step.

Documents (`docs`, monotone `[B, T]`) are handled with masks: a token reads the state that
entered its chunk only when it belongs to that state's document, intra-chunk pairs count only
within one document, and a chunk passes its entering state on only when no document starts
inside it.

Matmul operands are cast to the inputs' dtype with fp32 accumulation (fla's choice); fp32
inputs use HIGHEST precision so that TF32 never creeps in on GPUs.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ccq_jax.ops._common import HIGHEST, accum_dtype, ccq_correction, ccq_keys, vary_like
from ccq_jax.ops.types import CCQStats

SUB_CHUNK = 16


def _mm(spec, a, b, dtype):
    """einsum with operands in `dtype` and fp32 (or fp64) accumulation."""
    acc = jnp.result_type(jnp.float32, dtype)
    precision = HIGHEST if jnp.dtype(dtype).itemsize >= 4 else None
    return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), precision=precision, preferred_element_type=acc)


def _to_chunks(x, chunk):
    """[B, T, H, *] (T padded up to a multiple of `chunk` with zeros) -> [B, H, N, C, *]."""
    pad = -x.shape[1] % chunk
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    b, t, h = x.shape[:3]
    return jnp.moveaxis(x.reshape(b, t // chunk, chunk, h, *x.shape[3:]), 3, 1)


def _from_chunks(x, length):
    """[B, H, N, C, *] -> [B, T, H, *], dropping the padding."""
    b, h, n, c = x.shape[:4]
    return jnp.moveaxis(x, 1, 3).reshape(b, n * c, h, *x.shape[4:])[:, :length]


class _DocMasks(NamedTuple):
    """Where documents let information flow, per chunk (a head axis of size 1 broadcasts over H)."""

    causal: jax.Array  # [B, 1, N, C, C]  j <= i and same document
    reads_state: jax.Array  # [B, 1, N, C]  token i belongs to the document of the entering state
    writes_state: jax.Array  # [B, 1, N, C]  token j is real (not padding) and in the chunk's last document
    keep_state: jax.Array  # [B, 1, N]  no document starts inside the chunk


def _doc_masks(docs, chunk):
    length = docs.shape[1]
    pad = -length % chunk
    d = jnp.pad(docs, [(0, 0), (0, pad)], mode="edge")
    d = d.reshape(d.shape[0], -1, chunk)[:, None]  # [B, 1, N, C]
    real = (jnp.arange(length + pad) < length).reshape(-1, chunk)
    state_doc = jnp.concatenate([d[..., :1, 0], d[..., :-1, -1]], axis=-1)  # [B, 1, N]
    last = d[..., -1]
    tril = jnp.tril(jnp.ones((chunk, chunk), bool))
    return _DocMasks(
        causal=tril & (d[..., :, None] == d[..., None, :]),
        reads_state=d == state_doc[..., None],
        writes_state=(d == last[..., None]) & real,
        keep_state=last == state_doc,
    )


def _state_pass(decay, delta, init):
    """States entering each chunk: S_0 = init, S_{n+1} = decay_n * S_n + delta_n.

    decay: [B, H, N, *] broadcast against every leaf of the pytree `delta` ([B, H, N, ...]);
    init: the same pytree without the N axis. Returns (entering [B, H, N, ...], final).
    """

    def step(state, x):
        d, dl = x
        new = jax.tree.map(lambda s, e: d.reshape(d.shape + (1,) * (s.ndim - d.ndim)) * s + e, state, dl)
        return new, state

    move = lambda x: jnp.moveaxis(x, 2, 0)
    xs = (move(decay), jax.tree.map(move, delta))
    final, entering = jax.lax.scan(step, vary_like(init, xs), xs)
    return jax.tree.map(lambda x: jnp.moveaxis(x, 0, 2), entering), final


def _masked_exp(x, mask):
    """exp(x) where mask, 0 elsewhere, with finite gradients (the exponent is masked first)."""
    return jnp.exp(jnp.where(mask, x, -jnp.inf))


def _suffix_sum(x, axis):
    """sum_{l > j} x_l along `axis`, summed from the end so that small tails stay exact."""
    x = jnp.moveaxis(x, axis, -1)
    inclusive = jnp.flip(jnp.cumsum(jnp.flip(x, -1), -1), -1)
    exclusive = jnp.concatenate([inclusive[..., 1:], jnp.zeros_like(x[..., :1])], -1)
    return jnp.moveaxis(exclusive, -1, axis)


def _segment_sum(x, axis):
    """out[..., i, j, ...] = sum_{j < l <= i} x_l over `axis` of length C (0 for j >= i).

    Summing the terms directly, instead of differencing two cumsums, keeps the decay between
    nearby tokens exact even where the cumsums themselves are large (strong decay).
    """
    x = jnp.moveaxis(x, axis, -1)
    c = x.shape[-1]
    later = jnp.arange(c)[:, None] > jnp.arange(c)[None, :]  # [l, j]
    out = jnp.cumsum(jnp.where(later, x[..., :, None], 0), axis=-2)  # [..., i, j]
    return jnp.moveaxis(out, (-2, -1), (axis - 1, axis) if axis < 0 else (axis, axis + 1))


def _gla_intra_scores(q, k, g, dtype):
    """A[i, j] = sum_k q_ik k_jk exp(sum_{j < l <= i} g_lk) inside each chunk, 0 above the diagonal.

    Secondary chunking (sub-blocks of 16) keeps every exponent <= 0 and every decay computed
    from sums of the gates it spans: diagonal sub-blocks use the exact pairwise segment sum;
    an off-diagonal block factors through the start of the query sub-block, the query side
    decaying from there (a prefix sum) and the key side up to there (a suffix sum plus whole
    sub-blocks in between). q, k, g: [..., C, K] -> [..., C, C].
    """
    chunk, dk = q.shape[-2:]
    c = SUB_CHUNK if chunk % SUB_CHUNK == 0 else chunk
    s = chunk // c
    f = g.dtype
    sub = lambda x: x.reshape(*x.shape[:-2], s, c, dk)
    qs, ks, gs = sub(q.astype(f)), sub(k.astype(f)), sub(g)

    tri = jnp.tril(jnp.ones((c, c), bool))[..., None]
    pair = _masked_exp(_segment_sum(gs, axis=-2), tri)  # [..., S, c, c, K]
    diag = jnp.einsum("...ik,...jk,...ijk->...ij", qs, ks, pair, precision=HIGHEST)
    scores = diag[..., :, :, None, :] * jnp.eye(s, dtype=f)[:, None, :, None]  # [..., S, c, S, c]
    scores = scores.reshape(*scores.shape[:-2], chunk)  # [..., S, c, C]
    if s > 1:
        totals = jnp.sum(gs, axis=-2)  # [..., S, K]
        blocks = jnp.arange(s)
        strictly_between = (blocks[None, None, :] > blocks[None, :, None]) & (blocks[None, None, :] < blocks[:, None, None])
        between = jnp.einsum("abm,...mk->...abk", strictly_between.astype(f), totals, precision=HIGHEST)  # [..., S, S, K]
        to_block_end = _suffix_sum(gs, axis=-2)  # [..., S(b), c, K]
        key_exp = to_block_end[..., None, :, :, :] + between[..., :, :, None, :]  # [..., S(a), S(b), c, K]
        earlier = (blocks[:, None] > blocks[None, :])[:, :, None, None]
        k_off = ks[..., None, :, :, :] * _masked_exp(key_exp, earlier)
        k_off = k_off.reshape(*k_off.shape[:-4], s, chunk, dk)[..., 1:, :, :]  # [..., S-1, C, K]
        q_off = qs[..., 1:, :, :] * jnp.exp(jnp.cumsum(gs[..., 1:, :, :], axis=-2))
        off = _mm("...aik,...ajk->...aij", q_off, k_off, dtype)  # [..., S-1, c, C]
        scores = scores + jnp.pad(off, [(0, 0)] * (off.ndim - 3) + [(1, 0), (0, 0), (0, 0)])
    return scores.reshape(*scores.shape[:-3], chunk, chunk)


def gla(q, k, v, g, *, scale, initial_state, docs, chunk_size=64):
    """Chunked GLA; see `ccq_jax.ops.gla` for the recurrence."""
    length = q.shape[1]
    dtype = jnp.result_type(q, k, v)
    f = accum_dtype(q, k, v, g)
    m = _doc_masks(docs, chunk_size)
    qc, kc, vc = (_to_chunks(x, chunk_size) for x in (q, k, v))
    gc = _to_chunks(g, chunk_size).astype(f)  # [B, H, N, C, K]
    gcum = jnp.cumsum(gc, axis=-2)

    scores = jnp.where(m.causal, _gla_intra_scores(qc, kc, gc, dtype), 0)
    o_intra = _mm("...ij,...jv->...iv", scores, vc, dtype)

    g_last = gcum[..., -1, :]  # [B, H, N, K]
    k_to_end = kc * (jnp.exp(_suffix_sum(gc, axis=-2)) * m.writes_state[..., None])
    delta = _mm("...ck,...cv->...kv", k_to_end, vc, dtype)
    decay = jnp.exp(g_last) * m.keep_state[..., None]
    entering, final = _state_pass(decay, delta, initial_state.astype(f))

    q_from_start = qc * (jnp.exp(gcum) * m.reads_state[..., None])
    o_inter = _mm("...ck,...kv->...cv", q_from_start, entering, dtype)
    o = scale * (o_inter + o_intra)
    return _from_chunks(o, length).astype(v.dtype), final


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, chunk_size=64):
    """Chunked gated delta rule (WY/UT form); see `ccq_jax.ops.gated_delta_rule`."""
    length = q.shape[1]
    dtype = jnp.result_type(q, k, v)
    f = accum_dtype(q, k, v, g, beta)
    m = _doc_masks(docs, chunk_size)
    qc, kc, vc = (_to_chunks(x, chunk_size) for x in (q, k, v))
    bc = _to_chunks(beta, chunk_size).astype(f)  # [B, H, N, C]
    gc = _to_chunks(g, chunk_size).astype(f)  # [B, H, N, C]
    gcum = jnp.cumsum(gc, axis=-1)

    decay_ij = _masked_exp(_segment_sum(gc, axis=-1), m.causal)  # [B, H, N, C, C]
    strict = m.causal & ~jnp.eye(chunk_size, dtype=bool)
    kk = _mm("...ik,...jk->...ij", kc, kc, dtype)
    lower = jnp.eye(chunk_size, dtype=f) + jnp.where(strict, bc[..., :, None] * kk * decay_ij, 0)
    solve = lambda rhs: jax.lax.linalg.triangular_solve(lower, rhs, left_side=True, lower=True, unit_diagonal=True)
    u_v = solve(bc[..., None] * vc.astype(f))  # [B, H, N, C, V]
    w = solve(kc.astype(f) * (bc * jnp.exp(gcum) * m.reads_state)[..., None])  # [B, H, N, C, K]

    g_last = gcum[..., -1]
    k_to_end = kc.astype(f) * (jnp.exp(_suffix_sum(gc, axis=-1)) * m.writes_state)[..., None]
    delta = _mm("...ck,...cv->...kv", k_to_end, u_v, f)
    transition = _mm("...ck,...cl->...kl", k_to_end, w, f)  # [B, H, N, K, K]
    decay = jnp.exp(g_last) * m.keep_state

    def step(state, x):
        d, t, dl = x
        new = d[..., None, None] * state - jnp.einsum("bhkl,bhlv->bhkv", t, state, precision=HIGHEST) + dl
        return new, state

    move = lambda x: jnp.moveaxis(x, 2, 0)
    xs = (move(decay), move(transition), move(delta))
    final, entering = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    entering = jnp.moveaxis(entering, 0, 2)  # [B, H, N, K, V]

    u = u_v - _mm("...ck,...kv->...cv", w, entering, f)
    q_from_start = qc * (jnp.exp(gcum) * m.reads_state)[..., None]
    o_inter = _mm("...ck,...kv->...cv", q_from_start, entering, dtype)
    scores = _mm("...ik,...jk->...ij", qc, kc, dtype) * decay_ij
    o = scale * (o_inter + _mm("...ij,...jv->...iv", scores, u, dtype))
    return _from_chunks(o, length).astype(v.dtype), final


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, chunk_size=64):
    """Chunked CCQ read: the statistics are an undecayed linear attention with values k^."""
    length = q.shape[1]
    dtype = jnp.result_type(q, k)
    f = accum_dtype(q, k, lam)
    m = _doc_masks(docs, chunk_size)
    qc = _to_chunks(q, chunk_size)
    kh = _to_chunks(ccq_keys(k, normalize_keys), chunk_size)  # [B, H, N, C, K] fp32
    causal = m.causal.astype(f)

    cov_q = _mm("...ij,...jk->...ik", _mm("...ik,...jk->...ij", qc, kh, dtype) * causal, kh, dtype)
    key_sum = _mm("...ij,...jk->...ik", causal, kh, f)
    count = jnp.sum(causal, axis=-1)

    writes = m.writes_state.astype(f)
    delta = CCQStats(
        _mm("...ck,...cl->...kl", kh * writes[..., None], kh, dtype),
        jnp.sum(kh * writes[..., None], axis=-2),
        jnp.broadcast_to(jnp.sum(writes, axis=-1), kh.shape[:3]),
    )
    init = CCQStats(*(s.astype(f) for s in initial_stats))
    entering, final = _state_pass(m.keep_state.astype(f), delta, init)

    reads = m.reads_state.astype(f)
    cov_q = cov_q + reads[..., None] * _mm("...kl,...cl->...ck", entering.cov, qc, dtype)
    key_sum = key_sum + reads[..., None] * entering.key_sum[..., None, :]
    count = count + reads * entering.count[..., None]
    qf = qc.astype(f)
    q_clean = qf - _to_chunks(lam, chunk_size).astype(f)[..., None] * ccq_correction(cov_q, key_sum, count, qf, centered)
    return _from_chunks(q_clean, length).astype(q.dtype), final
