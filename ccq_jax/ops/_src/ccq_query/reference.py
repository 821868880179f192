"""The CCQ read in plain XLA: the token-by-token recurrence (the ground truth), the chunkwise form (an undecayed
linear attention with values k^), the associative scan; and `feeding`, the read composed with a backbone.

Each takes validated inputs (see `ccq_jax.ops.ccq_query`): q, k `[B, T, H, K]`, lam `[B, T, H]`, fp32
initial statistics, `docs`, the monotone document index `[B, T]`, and `read`, the `ReadPolicy`; it builds the
statistics once, hands `policies.clean` its way of applying Sigma_t to per-token vectors, and returns (q_clean
in q's dtype, the final statistics).
"""

import jax
import jax.numpy as jnp

from ..xla.chunking import doc_masks, from_chunks, mm, to_chunks
from ..xla.numerics import accum_dtype, ccq_correction, ccq_keys, resets, time_major, vary_like
from ..xla.numerics import zero_where
from ..xla.recurrences import diagonal_scan, fold_initial, state_pass
from ..xla.types import CCQStats
from .policies import clean, dense_apply


def recurrent(q, k, lam, *, centered, normalize_keys, initial_stats, docs, read):
    """q_clean_t from Sigma_t, the running covariance of k^ (current token included), e.g. q_t - lam_t Sigma_t q_t."""
    f = accum_dtype(q, k, lam)
    kh = ccq_keys(k, normalize_keys).astype(f)
    xs = time_major(q.astype(f), kh, lam.astype(f), resets(docs))

    def step(stats, x):
        q_t, k_t, lam_t, r_t = x
        cov, key_sum, count = (zero_where(r_t, s) for s in stats)
        stats = CCQStats(cov + k_t[..., :, None] * k_t[..., None, :], key_sum + k_t, count + 1)
        return stats, clean(q_t, lam_t, dense_apply(stats, centered), read)

    init = CCQStats(*(s.astype(f) for s in initial_stats))
    final, q_clean = jax.lax.scan(step, vary_like(init, xs), xs)
    return jnp.moveaxis(q_clean, 0, 1).astype(q.dtype), final


def chunk(q, k, lam, *, centered, normalize_keys, initial_stats, docs, read, chunk_size=64):
    """Chunked CCQ read: the statistics are an undecayed linear attention with values k^; each product Sigma_t x_t
    is one such attention on the statistics entering the chunks (formed once)."""
    length = q.shape[1]
    dtype = jnp.result_type(q, k)
    f = accum_dtype(q, k, lam)
    m = doc_masks(docs, chunk_size)
    qc = to_chunks(q, chunk_size)
    kh = to_chunks(ccq_keys(k, normalize_keys), chunk_size)  # [B, H, N, C, K] fp32
    causal = m.causal.astype(f)

    key_sum = mm("...ij,...jk->...ik", causal, kh, f)
    count = jnp.sum(causal, axis=-1)

    writes = m.writes_state.astype(f)
    delta = CCQStats(
        mm("...ck,...cl->...kl", kh * writes[..., None], kh, dtype),
        jnp.sum(kh * writes[..., None], axis=-2),
        jnp.broadcast_to(jnp.sum(writes, axis=-1), kh.shape[:3]),
    )
    init = CCQStats(*(s.astype(f) for s in initial_stats))
    entering, final = state_pass(m.keep_state.astype(f), delta, init)

    reads = m.reads_state.astype(f)
    key_sum = key_sum + reads[..., None] * entering.key_sum[..., None, :]
    count = count + reads * entering.count[..., None]

    def apply(x):
        cov_x = mm("...ij,...jk->...ik", mm("...ik,...jk->...ij", x, kh, dtype) * causal, kh, dtype)
        cov_x = cov_x + reads[..., None] * mm("...kl,...cl->...ck", entering.cov, x, dtype)
        return ccq_correction(cov_x, key_sum, count, x, centered)

    q_clean = clean(qc.astype(f), to_chunks(lam, chunk_size).astype(f), apply, read)
    return from_chunks(q_clean, length).astype(q.dtype), final


def scan(q, k, lam, *, centered, normalize_keys, initial_stats, docs, read):
    """The CCQ read as a `lax.associative_scan` of the statistics (a check, not a path)."""
    f = accum_dtype(q, k, lam)
    qf = q.astype(f)
    kh = ccq_keys(k, normalize_keys).astype(f)
    a = jnp.broadcast_to(~resets(docs)[:, :, None], lam.shape).astype(f)  # [B, T, H]
    init = CCQStats(*(s.astype(f) for s in initial_stats))
    b = CCQStats(kh[..., :, None] * kh[..., None, :], kh, jnp.ones_like(a))
    b = CCQStats(*(fold_initial(x, a[:, 0], i) for x, i in zip(b, init)))
    stats = CCQStats(*diagonal_scan(a, b))
    q_clean = clean(qf, lam.astype(f), dense_apply(stats, centered), read)
    return q_clean.astype(q.dtype), CCQStats(*(s[:, -1] for s in stats))


def feeding(form, backbone):
    """The fused CCQ op's signature, composed: `backbone(form(q, k, lam), k, *rest)`. form and backbone: one form
    of the read and of the backbone (chunk_size, when given, goes to both). `read`, the policy, goes to the form
    when given: the XLA forms take it, a kernel form (the Mosaic TPU composition) takes none and computes the
    first-order read (`api.policy_options` gives kernels no other)."""

    def fused(q, k, *rest_and_lam, scale, initial_state, initial_stats, centered, normalize_keys, docs, read=None,
              **chunk):
        *rest, lam = rest_and_lam
        policy = {} if read is None else {"read": read}
        q_clean, final_stats = form(q, k, lam, centered=centered, normalize_keys=normalize_keys,
                                    initial_stats=initial_stats, docs=docs, **policy, **chunk)
        o, final_state = backbone(q_clean, k, *rest, scale=scale, initial_state=initial_state, docs=docs, **chunk)
        return o, (final_state, final_stats)

    return fused
