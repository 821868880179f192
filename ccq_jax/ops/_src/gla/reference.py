"""GLA in plain XLA: the token-by-token recurrence (the ground truth), the chunkwise form, the associative scan.

Each takes validated inputs (see `ccq_jax.ops.gla`): q, k, g `[B, T, H, K]`, v `[B, T, H, V]`, an
fp32 initial state `[B, H, K, V]` and `docs`, the monotone document index `[B, T]` (the state
resets where it increases), and returns (o in v's dtype, the final state).
"""

import jax
import jax.numpy as jnp

from ..xla.chunking import doc_masks, from_chunks, intra_scores, mm, suffix_sum, to_chunks
from ..xla.numerics import HIGHEST, accum_dtype, resets, time_major, vary_like, zero_where
from ..xla.recurrences import diagonal_scan, fold_initial, state_pass


def recurrent(q, k, v, g, *, scale, initial_state, docs):
    """S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T;  o_t = scale * S_t^T q_t, one token at a time."""
    f = accum_dtype(q, k, v, g)
    xs = time_major(q.astype(f), k.astype(f), v.astype(f), g.astype(f), resets(docs))

    def step(state, x):
        q_t, k_t, v_t, g_t, r_t = x
        state = zero_where(r_t, state) * jnp.exp(g_t)[..., None] + k_t[..., None] * v_t[..., None, :]
        return state, scale * jnp.einsum("bhk,bhkv->bhv", q_t, state, precision=HIGHEST)

    final, o = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    return jnp.moveaxis(o, 0, 1).astype(v.dtype), final


def chunk(q, k, v, g, *, scale, initial_state, docs, chunk_size=64):
    """Chunkwise-parallel GLA: intra-chunk scores for all chunks at once, one `lax.scan` of the fp32 state across
    chunks (docs/design.md derives each step)."""
    length = q.shape[1]
    dtype = jnp.result_type(q, k, v)
    f = accum_dtype(q, k, v, g)
    m = doc_masks(docs, chunk_size)
    qc, kc, vc = (to_chunks(x, chunk_size) for x in (q, k, v))
    gc = to_chunks(g, chunk_size).astype(f)  # [B, H, N, C, K]
    gcum = jnp.cumsum(gc, axis=-2)

    scores = jnp.where(m.causal, intra_scores(qc, kc, gc, dtype), 0)
    o_intra = mm("...ij,...jv->...iv", scores, vc, dtype)

    g_last = gcum[..., -1, :]  # [B, H, N, K]
    k_to_end = kc * (jnp.exp(suffix_sum(gc, axis=-2)) * m.writes_state[..., None])
    delta = mm("...ck,...cv->...kv", k_to_end, vc, dtype)
    decay = jnp.exp(g_last) * m.keep_state[..., None]
    entering, final = state_pass(decay, delta, initial_state.astype(f))

    q_from_start = qc * (jnp.exp(gcum) * m.reads_state[..., None])
    o_inter = mm("...ck,...kv->...cv", q_from_start, entering, dtype)
    o = scale * (o_inter + o_intra)
    return from_chunks(o, length).astype(v.dtype), final


def scan(q, k, v, g, *, scale, initial_state, docs):
    """GLA as a `lax.associative_scan` over T: every state materialised, O(T) memory (a check, not a path)."""
    f = accum_dtype(q, k, v, g)
    q, k, v = (x.astype(f) for x in (q, k, v))
    a = jnp.exp(g.astype(f)) * ~resets(docs)[:, :, None, None]  # [B, T, H, K]
    b = fold_initial(k[..., None] * v[..., None, :], a[:, 0], initial_state.astype(f))
    states = diagonal_scan(a, b)  # [B, T, H, K, V]
    o = scale * jnp.einsum("bthk,bthkv->bthv", q, states, precision=HIGHEST)
    return o.astype(v.dtype), states[:, -1]
