"""The generalized delta rule in plain XLA: the token-by-token recurrence (the ground truth), the chunkwise WY/UT
form with the per-channel decay inside the chunk, and the associative scan over dense K x K transitions.

Each takes validated inputs (see `ccq_jax.ops.generalized_delta_rule`): q, k, g, a `[B, T, H, K]`, v (the written
value) `[B, T, H, V]`, an fp32 initial state and `docs`, the monotone document index `[B, T]`, and returns (o in v's
dtype, the final state).
"""

import jax
import jax.numpy as jnp

from ..xla.chunking import doc_masks, from_chunks, intra_scores, suffix_sum, to_chunks
from ..xla.numerics import HIGHEST, accum_dtype, resets, time_major, vary_like, zero_where
from ..xla.recurrences import DeltaFactors, dense_scan, delta_chunk_pass


def recurrent(q, k, v, g, a, *, scale, initial_state, docs):
    """S = Diag(exp g_t) S; S += k_t (v_t - S^T a_t)^T; o_t = scale S^T q_t, one token at a time."""
    f = accum_dtype(q, k, v, g, a)
    xs = time_major(q.astype(f), k.astype(f), v.astype(f), g.astype(f), a.astype(f), resets(docs))

    def step(state, x):
        q_t, k_t, v_t, g_t, a_t, r_t = x
        state = zero_where(r_t, state) * jnp.exp(g_t)[..., None]
        new = v_t - jnp.einsum("bhkv,bhk->bhv", state, a_t, precision=HIGHEST)
        state = state + k_t[..., None] * new[..., None, :]
        return state, scale * jnp.einsum("bhk,bhkv->bhv", q_t, state, precision=HIGHEST)

    final, o = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    return jnp.moveaxis(o, 0, 1).astype(v.dtype), final


def chunk_factors(q, k, v, g, a, docs, chunk_size):
    """`DeltaFactors` of the chunked generalized delta rule (docs/design.md, "The generalized delta rule").

    Inside a chunk, with G_i the in-chunk cumsum of the gates and S_0 the state entering it, the new values
    n_i = v_i - (Diag(exp g_i) S_{i-1})^T a_i solve (I + A) n = v - W S_0 with A_ij = sum_c a_ic k_jc
    exp(G_ic - G_jc) (j < i) and W_i = exp(G_i) a_i: the UT transform u_v = (I + A)^-1 v, w = (I + A)^-1 W. Then
    o_i = scale (S_0^T (exp(G_i) q_i) + sum_{j <= i} P_ij n_j) with P_ij = sum_c q_ic k_jc exp(G_ic - G_jc), and the
    state leaving the chunk is Diag(exp G_C) S_0 + sum_j (exp(G_C - G_j) k_j) n_j^T: the decay is per key channel
    [B, H, N, K]. A and P are GLA's intra-chunk scores (`intra_scores`, secondary chunking): every exponent is <= 0.
    """
    dtype = jnp.result_type(q, k, v, a)
    f = accum_dtype(q, k, v, g, a)
    m = doc_masks(docs, chunk_size)
    qc, kc, vc, ac = (to_chunks(x, chunk_size) for x in (q, k, v, a))
    gc = to_chunks(g, chunk_size).astype(f)  # [B, H, N, C, K]
    gcum = jnp.cumsum(gc, axis=-2)

    strict = m.causal & ~jnp.eye(chunk_size, dtype=bool)
    lower = jnp.eye(chunk_size, dtype=f) + jnp.where(strict, intra_scores(ac, kc, gc, dtype), 0)
    solve = lambda rhs: jax.lax.linalg.triangular_solve(lower, rhs, left_side=True, lower=True, unit_diagonal=True)
    u_v = solve(vc.astype(f))  # [B, H, N, C, V]
    w = solve(ac.astype(f) * jnp.exp(gcum) * m.reads_state[..., None])  # [B, H, N, C, K]
    k_to_end = kc.astype(f) * jnp.exp(suffix_sum(gc, axis=-2)) * m.writes_state[..., None]
    decay = jnp.exp(gcum[..., -1, :]) * m.keep_state[..., None]  # [B, H, N, K]
    q_from_start = qc * jnp.exp(gcum) * m.reads_state[..., None]
    scores = jnp.where(m.causal, intra_scores(qc, kc, gc, dtype), 0)
    return DeltaFactors(u_v, w, k_to_end, decay, q_from_start, scores)


def chunk(q, k, v, g, a, *, scale, initial_state, docs, chunk_size=64):
    """Chunked generalized delta rule: `chunk_factors`, then one `lax.scan` of the state across chunks."""
    o, final = delta_chunk_pass(chunk_factors(q, k, v, g, a, docs, chunk_size), initial_state, scale,
                                accum_dtype(q, k, v, g, a), jnp.result_type(q, k, v, a))
    return from_chunks(o, q.shape[1]).astype(v.dtype), final


def scan(q, k, v, g, a, *, scale, initial_state, docs):
    """The generalized delta rule as a `lax.associative_scan` of (K x K transition, state) pairs, the transitions
    (I - k_t a_t^T) Diag(exp g_t) materialised (a check, not a path)."""
    f = accum_dtype(q, k, v, g, a)
    q, k, v, a = (x.astype(f) for x in (q, k, v, a))
    keep = jnp.exp(g.astype(f)) * ~resets(docs)[:, :, None, None]  # [B, T, H, K]
    eye = jnp.eye(k.shape[-1], dtype=f)
    step = (eye - k[..., :, None] * a[..., None, :]) * keep[..., None, :]  # [B, T, H, K, K]
    b = k[..., :, None] * v[..., None, :]
    b = b.at[:, 0].add(jnp.einsum("bhkl,bhlv->bhkv", step[:, 0], initial_state.astype(f), precision=HIGHEST))
    states = dense_scan(step, b)
    o = scale * jnp.einsum("bthk,bthkv->bthv", q, states, precision=HIGHEST)
    return o.astype(v.dtype), states[:, -1]
