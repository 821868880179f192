"""The chunked layout every chunkwise form shares (XLA forms and the Pallas backends' wrappers).

The sequence is padded to a multiple of the chunk length C and viewed as N chunks; documents
(`docs`, the monotone document index `[B, T]`) become masks per chunk. Einsums take their
operands in the inputs' dtype with fp32 (or fp64) accumulation (fla's choice); fp32 inputs use
HIGHEST precision so that TF32 never creeps in on GPUs.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .numerics import HIGHEST

SUB_CHUNK = 16  # secondary chunk of the GLA chunk form: the diagonal blocks whose pairwise decays are exact


def masked_exp(x, mask):
    """exp(x) where mask, 0 elsewhere (the exponent is masked first, so nothing overflows)."""
    return jnp.exp(jnp.where(mask, x, -jnp.inf))


def mm(spec, a, b, dtype):
    """einsum with operands in `dtype` and fp32 (or fp64) accumulation."""
    acc = jnp.result_type(jnp.float32, dtype)
    precision = HIGHEST if jnp.dtype(dtype).itemsize >= 4 else None
    return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), precision=precision, preferred_element_type=acc)


def to_chunks(x, chunk):
    """[B, T, H, *] (T padded up to a multiple of `chunk` with zeros) -> [B, H, N, C, *]."""
    pad = -x.shape[1] % chunk
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    b, t, h = x.shape[:3]
    return jnp.moveaxis(x.reshape(b, t // chunk, chunk, h, *x.shape[3:]), 3, 1)


def from_chunks(x, length):
    """[B, H, N, C, *] -> [B, T, H, *], dropping the padding."""
    b, h, n, c = x.shape[:4]
    return jnp.moveaxis(x, 1, 3).reshape(b, n * c, h, *x.shape[4:])[:, :length]


class DocMasks(NamedTuple):
    """Where documents let information flow, per chunk (a head axis of size 1 broadcasts over H)."""

    causal: jax.Array  # [B, 1, N, C, C]  j <= i and same document
    reads_state: jax.Array  # [B, 1, N, C]  token i belongs to the document of the entering state
    writes_state: jax.Array  # [B, 1, N, C]  token j is real (not padding) and in the chunk's last document
    keep_state: jax.Array  # [B, 1, N]  no document starts inside the chunk


def doc_masks(docs, chunk):
    """`DocMasks` of the document index `docs` [B, T] in chunks of `chunk` tokens."""
    length = docs.shape[1]
    pad = -length % chunk
    d = jnp.pad(docs, [(0, 0), (0, pad)], mode="edge")
    d = d.reshape(d.shape[0], -1, chunk)[:, None]  # [B, 1, N, C]
    real = (jnp.arange(length + pad) < length).reshape(-1, chunk)
    state_doc = jnp.concatenate([d[..., :1, 0], d[..., :-1, -1]], axis=-1)  # [B, 1, N]
    last = d[..., -1]
    tril = jnp.tril(jnp.ones((chunk, chunk), bool))
    return DocMasks(
        causal=tril & (d[..., :, None] == d[..., None, :]),
        reads_state=d == state_doc[..., None],
        writes_state=(d == last[..., None]) & real,
        keep_state=last == state_doc,
    )


def suffix_sum(x, axis):
    """sum_{l > j} x_l along `axis`, summed from the end so that small tails stay exact."""
    x = jnp.moveaxis(x, axis, -1)
    inclusive = jnp.flip(jnp.cumsum(jnp.flip(x, -1), -1), -1)
    exclusive = jnp.concatenate([inclusive[..., 1:], jnp.zeros_like(x[..., :1])], -1)
    return jnp.moveaxis(exclusive, -1, axis)


def segment_sum(x, axis):
    """out[..., i, j, ...] = sum_{j < l <= i} x_l over `axis` of length C (0 for j >= i).

    Summing the terms directly, instead of differencing two cumsums, keeps the decay between
    nearby tokens exact even where the cumsums themselves are large (strong decay).
    """
    x = jnp.moveaxis(x, axis, -1)
    c = x.shape[-1]
    later = jnp.arange(c)[:, None] > jnp.arange(c)[None, :]  # [l, j]
    out = jnp.cumsum(jnp.where(later, x[..., :, None], 0), axis=-2)  # [..., i, j]
    return jnp.moveaxis(out, (-2, -1), (axis - 1, axis) if axis < 0 else (axis, axis + 1))


def diagonal_scores(q, k, g):
    """D[i, j] = sum_k q_ik k_jk exp(sum_{j < l <= i} g_lk) for i >= j, 0 above: q, k, g [..., c, K] -> [..., c, c].

    One key position j at a time (`lax.map`, each step recomputed in the backward pass): the per-channel pairwise
    decay [..., c, c, K] is never formed whole (with K = 128 channels it is 16 times the size of q: 4 GiB a chip for
    KDA-1.3B's 8 rows of 4096, several alive at once in the backward). Column j's exponents are `segment_sum`'s."""
    c = g.shape[-2]
    rows = jnp.arange(c)

    @jax.checkpoint
    def column(j):
        exponent = jnp.cumsum(jnp.where((rows > j)[:, None], g, 0), axis=-2)  # [..., c, K]: sum_{j < l <= i} g_l
        decay = masked_exp(exponent, (rows >= j)[:, None])
        key = jax.lax.dynamic_index_in_dim(k, j, axis=k.ndim - 2, keepdims=False)  # [..., K]
        return jnp.einsum("...ik,...k->...i", q * decay, key, precision=HIGHEST)

    return jnp.moveaxis(jax.lax.map(column, rows), 0, -1)


def intra_scores(q, k, g, dtype):
    """A[i, j] = sum_k q_ik k_jk exp(sum_{j < l <= i} g_lk) inside each chunk, 0 above the diagonal.

    Secondary chunking (sub-blocks of 16) keeps every exponent <= 0 and every decay computed
    from sums of the gates it spans: diagonal sub-blocks use the exact pairwise segment sum;
    an off-diagonal block factors through the start of the query sub-block, the query side
    decaying from there (a prefix sum) and the key side up to there (a suffix sum plus whole
    sub-blocks in between). q, k, g: [..., C, K] -> [..., C, C]. GLA's scores, and the generalized delta rule's
    (a, k) and (q, k) products with their per-channel decays.
    """
    chunk, dk = q.shape[-2:]
    c = SUB_CHUNK if chunk % SUB_CHUNK == 0 else chunk
    s = chunk // c
    f = g.dtype
    sub = lambda x: x.reshape(*x.shape[:-2], s, c, dk)
    qs, ks, gs = sub(q.astype(f)), sub(k.astype(f)), sub(g)

    diag = diagonal_scores(qs, ks, gs)  # [..., S, c, c]
    scores = diag[..., :, :, None, :] * jnp.eye(s, dtype=f)[:, None, :, None]  # [..., S, c, S, c]
    scores = scores.reshape(*scores.shape[:-2], chunk)  # [..., S, c, C]
    if s > 1:
        # a sub-block's total gate, clamped to the lowest finite value: a whole sub-block of g = -inf would
        # otherwise turn the 0 * total terms of `between` into NaN (the decay across it is exp(-huge) = 0 all the same)
        totals = jnp.maximum(jnp.sum(gs, axis=-2), jnp.finfo(f).min)  # [..., S, K]
        blocks = jnp.arange(s)
        strictly_between = (blocks[None, None, :] > blocks[None, :, None]) & (blocks[None, None, :] < blocks[:, None, None])
        between = jnp.einsum("abm,...mk->...abk", strictly_between.astype(f), totals, precision=HIGHEST)  # [..., S, S, K]
        to_block_end = suffix_sum(gs, axis=-2)  # [..., S(b), c, K]
        key_exp = to_block_end[..., None, :, :, :] + between[..., :, :, None, :]  # [..., S(a), S(b), c, K]
        earlier = (blocks[:, None] > blocks[None, :])[:, :, None, None]
        k_off = ks[..., None, :, :, :] * masked_exp(key_exp, earlier)
        k_off = k_off.reshape(*k_off.shape[:-4], s, chunk, dk)[..., 1:, :, :]  # [..., S-1, C, K]
        q_off = qs[..., 1:, :, :] * jnp.exp(jnp.cumsum(gs[..., 1:, :, :], axis=-2))
        off = mm("...aik,...ajk->...aij", q_off, k_off, dtype)  # [..., S-1, c, C]
        scores = scores + jnp.pad(off, [(0, 0)] * (off.ndim - 3) + [(1, 0), (0, 0), (0, 0)])
    return scores.reshape(*scores.shape[:-3], chunk, chunk)
