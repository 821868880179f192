"""Associative-scan forms (`jax.lax.associative_scan` over T): log-depth, every state materialised.

Each recurrence is written as h_t = A_t h_{t-1} + b_t and combined with
(A1, b1) o (A2, b2) = (A2 A1, A2 b1 + b2). A document start sets A_t = 0; the initial state is
folded into b_0. Memory is O(T) states, so this form is a reference and a check of the
others, not a training path.
"""

import jax
import jax.numpy as jnp

from ccq_jax.ops._common import HIGHEST, accum_dtype, ccq_correction, ccq_keys, resets
from ccq_jax.ops.types import CCQStats


def _diagonal_scan(a, b):
    """h_t = a_t * h_{t-1} + b_t along axis 1; a: [B, T, ...] broadcast against each leaf of b."""

    def expand(x, leaf):
        return x.reshape(x.shape + (1,) * (leaf.ndim - x.ndim))

    def combine(first, second):
        (a1, b1), (a2, b2) = first, second
        return a1 * a2, jax.tree.map(lambda x1, x2: expand(a2, x1) * x1 + x2, b1, b2)

    return jax.lax.associative_scan(combine, (a, b), axis=1)[1]


def _fold_initial(b, a0, init):
    """b_0 += a_0 * h_{-1}: the initial state enters through the first transition."""
    return b.at[:, 0].add(a0.reshape(a0.shape + (1,) * (init.ndim - a0.ndim)) * init)


def gla(q, k, v, g, *, scale, initial_state, docs):
    f = accum_dtype(q, k, v, g)
    q, k, v = (x.astype(f) for x in (q, k, v))
    a = jnp.exp(g.astype(f)) * ~resets(docs)[:, :, None, None]  # [B, T, H, K]
    b = _fold_initial(k[..., None] * v[..., None, :], a[:, 0], initial_state.astype(f))
    states = _diagonal_scan(a, b)  # [B, T, H, K, V]
    o = scale * jnp.einsum("bthk,bthkv->bthv", q, states, precision=HIGHEST)
    return o.astype(v.dtype), states[:, -1]


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs):
    f = accum_dtype(q, k, v, g, beta)
    q, k, v, beta = (x.astype(f) for x in (q, k, v, beta))
    keep = jnp.exp(g.astype(f)) * ~resets(docs)[:, :, None]  # [B, T, H]
    eye = jnp.eye(k.shape[-1], dtype=f)
    a = keep[..., None, None] * (eye - beta[..., None, None] * k[..., :, None] * k[..., None, :])  # [B, T, H, K, K]
    b = (beta[..., None] * k)[..., None] * v[..., None, :]
    b = b.at[:, 0].add(jnp.einsum("bhkl,bhlv->bhkv", a[:, 0], initial_state.astype(f), precision=HIGHEST))

    def combine(first, second):
        (a1, b1), (a2, b2) = first, second
        mm = lambda x, y: jnp.einsum("...kl,...lv->...kv", x, y, precision=HIGHEST)
        return mm(a2, a1), mm(a2, b1) + b2

    states = jax.lax.associative_scan(combine, (a, b), axis=1)[1]
    o = scale * jnp.einsum("bthk,bthkv->bthv", q, states, precision=HIGHEST)
    return o.astype(v.dtype), states[:, -1]


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs):
    f = accum_dtype(q, k, lam)
    qf = q.astype(f)
    kh = ccq_keys(k, normalize_keys).astype(f)
    a = jnp.broadcast_to(~resets(docs)[:, :, None], lam.shape).astype(f)  # [B, T, H]
    init = CCQStats(*(s.astype(f) for s in initial_stats))
    b = CCQStats(kh[..., :, None] * kh[..., None, :], kh, jnp.ones_like(a))
    b = CCQStats(*(_fold_initial(x, a[:, 0], i) for x, i in zip(b, init)))
    stats = CCQStats(*_diagonal_scan(a, b))
    cov_q = jnp.einsum("bthij,bthj->bthi", stats.cov, qf, precision=HIGHEST)
    q_clean = qf - lam.astype(f)[..., None] * ccq_correction(cov_q, stats.key_sum, stats.count, qf, centered)
    return q_clean.astype(q.dtype), CCQStats(*(s[:, -1] for s in stats))
