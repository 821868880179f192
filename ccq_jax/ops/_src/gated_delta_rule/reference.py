"""The gated delta rule in plain XLA: the token-by-token recurrence (the ground truth), the chunkwise WY/UT form,
and the associative scan over dense K x K transitions.

Each takes validated inputs (see `ccq_jax.ops.gated_delta_rule`): q, k `[B, T, H, K]`, v `[B, T, H, V]`,
per-head g and beta `[B, T, H]`, an fp32 initial state and `docs`, the monotone document index `[B, T]`,
and returns (o in v's dtype, the final state).
"""

import jax
import jax.numpy as jnp

from ..xla.chunking import doc_masks, from_chunks, masked_exp, mm, segment_sum, suffix_sum, to_chunks
from ..xla.numerics import HIGHEST, accum_dtype, resets, time_major, vary_like, zero_where
from ..xla.recurrences import DeltaFactors, dense_scan, delta_chunk_pass


def recurrent(q, k, v, g, beta, *, scale, initial_state, docs):
    """fla's gated delta rule: S = exp(g_t) S; u = beta_t (v_t - S^T k_t); S += k_t u^T; o = scale S^T q_t."""
    f = accum_dtype(q, k, v, g, beta)
    xs = time_major(q.astype(f), k.astype(f), v.astype(f), g.astype(f), beta.astype(f), resets(docs))

    def step(state, x):
        q_t, k_t, v_t, g_t, b_t, r_t = x
        state = zero_where(r_t, state) * jnp.exp(g_t)[..., None, None]
        u = b_t[..., None] * (v_t - jnp.einsum("bhkv,bhk->bhv", state, k_t, precision=HIGHEST))
        state = state + k_t[..., None] * u[..., None, :]
        return state, scale * jnp.einsum("bhk,bhkv->bhv", q_t, state, precision=HIGHEST)

    final, o = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    return jnp.moveaxis(o, 0, 1).astype(v.dtype), final


def chunk_factors(q, k, v, g, beta, docs, chunk_size):
    """`DeltaFactors` of the WY/UT form: T = (I + A)^-1 per chunk, u_v = T beta v, w = T beta exp(G) k."""
    dtype = jnp.result_type(q, k, v)
    f = accum_dtype(q, k, v, g, beta)
    m = doc_masks(docs, chunk_size)
    qc, kc, vc = (to_chunks(x, chunk_size) for x in (q, k, v))
    bc = to_chunks(beta, chunk_size).astype(f)  # [B, H, N, C]
    gc = to_chunks(g, chunk_size).astype(f)  # [B, H, N, C]
    gcum = jnp.cumsum(gc, axis=-1)

    decay_ij = masked_exp(segment_sum(gc, axis=-1), m.causal)  # [B, H, N, C, C]
    strict = m.causal & ~jnp.eye(chunk_size, dtype=bool)
    kk = mm("...ik,...jk->...ij", kc, kc, dtype)
    lower = jnp.eye(chunk_size, dtype=f) + jnp.where(strict, bc[..., :, None] * kk * decay_ij, 0)
    solve = lambda rhs: jax.lax.linalg.triangular_solve(lower, rhs, left_side=True, lower=True, unit_diagonal=True)
    u_v = solve(bc[..., None] * vc.astype(f))  # [B, H, N, C, V]
    w = solve(kc.astype(f) * (bc * jnp.exp(gcum) * m.reads_state)[..., None])  # [B, H, N, C, K]
    k_to_end = kc.astype(f) * (jnp.exp(suffix_sum(gc, axis=-1)) * m.writes_state)[..., None]
    decay = jnp.exp(gcum[..., -1]) * m.keep_state
    q_from_start = qc * (jnp.exp(gcum) * m.reads_state)[..., None]
    scores = mm("...ik,...jk->...ij", qc, kc, dtype) * decay_ij
    return DeltaFactors(u_v, w, k_to_end, decay, q_from_start, scores)


def chunk(q, k, v, g, beta, *, scale, initial_state, docs, chunk_size=64):
    """Chunked gated delta rule (WY/UT form): `chunk_factors`, then one `lax.scan` of the state across chunks."""
    o, final = delta_chunk_pass(chunk_factors(q, k, v, g, beta, docs, chunk_size), initial_state, scale,
                                accum_dtype(q, k, v, g, beta), jnp.result_type(q, k, v))
    return from_chunks(o, q.shape[1]).astype(v.dtype), final


def scan(q, k, v, g, beta, *, scale, initial_state, docs):
    """The gated delta rule as a `lax.associative_scan` of (K x K transition, state) pairs (a check, not a path)."""
    f = accum_dtype(q, k, v, g, beta)
    q, k, v, beta = (x.astype(f) for x in (q, k, v, beta))
    keep = jnp.exp(g.astype(f)) * ~resets(docs)[:, :, None]  # [B, T, H]
    eye = jnp.eye(k.shape[-1], dtype=f)
    a = keep[..., None, None] * (eye - beta[..., None, None] * k[..., :, None] * k[..., None, :])  # [B, T, H, K, K]
    b = (beta[..., None] * k)[..., None] * v[..., None, :]
    b = b.at[:, 0].add(jnp.einsum("bhkl,bhlv->bhkv", a[:, 0], initial_state.astype(f), precision=HIGHEST))
    states = dense_scan(a, b)
    o = scale * jnp.einsum("bthk,bthkv->bthv", q, states, precision=HIGHEST)
    return o.astype(v.dtype), states[:, -1]
