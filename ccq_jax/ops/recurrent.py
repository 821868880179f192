"""Token-by-token recurrences (a `lax.scan` over T in fp32): the ground truth of every op.

Each function takes validated inputs (see `ccq_jax.ops`): tensors `[B, T, H, *]`, an fp32
initial state, and `docs`, the monotone document index `[B, T]` (state resets where it
increases). Each returns the per-token outputs and the final state.
"""

import jax
import jax.numpy as jnp

from ccq_jax.ops._common import HIGHEST, accum_dtype, ccq_correction, ccq_keys, resets, vary_like
from ccq_jax.ops.types import CCQStats


def _time_major(*xs):
    return [jnp.moveaxis(x, 1, 0) for x in xs]


def _zero_where(reset_t, state):
    """Zero each batch row of `state` whose token starts a new document."""
    return jnp.where(reset_t.reshape((-1,) + (1,) * (state.ndim - 1)), 0, state)


def gla(q, k, v, g, *, scale, initial_state, docs):
    """S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T;  o_t = scale * S_t^T q_t."""
    f = accum_dtype(q, k, v, g)
    xs = _time_major(q.astype(f), k.astype(f), v.astype(f), g.astype(f), resets(docs))

    def step(state, x):
        q_t, k_t, v_t, g_t, r_t = x
        state = _zero_where(r_t, state) * jnp.exp(g_t)[..., None] + k_t[..., None] * v_t[..., None, :]
        return state, scale * jnp.einsum("bhk,bhkv->bhv", q_t, state, precision=HIGHEST)

    final, o = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    return jnp.moveaxis(o, 0, 1).astype(v.dtype), final


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs):
    """fla's gated delta rule: S = exp(g_t) S; u = beta_t (v_t - S^T k_t); S += k_t u^T; o = scale S^T q_t."""
    f = accum_dtype(q, k, v, g, beta)
    xs = _time_major(q.astype(f), k.astype(f), v.astype(f), g.astype(f), beta.astype(f), resets(docs))

    def step(state, x):
        q_t, k_t, v_t, g_t, b_t, r_t = x
        state = _zero_where(r_t, state) * jnp.exp(g_t)[..., None, None]
        u = b_t[..., None] * (v_t - jnp.einsum("bhkv,bhk->bhv", state, k_t, precision=HIGHEST))
        state = state + k_t[..., None] * u[..., None, :]
        return state, scale * jnp.einsum("bhk,bhkv->bhv", q_t, state, precision=HIGHEST)

    final, o = jax.lax.scan(step, vary_like(initial_state.astype(f), xs), xs)
    return jnp.moveaxis(o, 0, 1).astype(v.dtype), final


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs):
    """q_clean_t = q_t - lam_t Sigma_t q_t with Sigma_t the running covariance of k^ (current token included)."""
    f = accum_dtype(q, k, lam)
    kh = ccq_keys(k, normalize_keys).astype(f)
    xs = _time_major(q.astype(f), kh, lam.astype(f), resets(docs))

    def step(stats, x):
        q_t, k_t, lam_t, r_t = x
        cov, key_sum, count = (_zero_where(r_t, s) for s in stats)
        stats = CCQStats(cov + k_t[..., :, None] * k_t[..., None, :], key_sum + k_t, count + 1)
        cov_q = jnp.einsum("bhij,bhj->bhi", stats.cov, q_t, precision=HIGHEST)
        sigma_q = ccq_correction(cov_q, stats.key_sum, stats.count, q_t, centered)
        return stats, q_t - lam_t[..., None] * sigma_q

    init = CCQStats(*(s.astype(f) for s in initial_stats))
    final, q_clean = jax.lax.scan(step, vary_like(init, xs), xs)
    return jnp.moveaxis(q_clean, 0, 1).astype(q.dtype), final
