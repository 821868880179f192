"""The CCQ read on the Mosaic TPU kernels: its covariance term C_t q_t is GLA's kernel with no decay, values k^
and scale 1 (`pallas.mosaic_tpu.chunked`), the rest XLA.

C_t q_t = C_0 q_t + sum_{j <= t} k^_j (k^_j . q_t) over t's document is the O(T K^2) part; the
key sums m_t and counts n_t (O(T K)) are a log-depth scan (`recurrences.diagonal_scan`), and the
cleaned query q - lam (C q / n - (m / n)(m / n)^T q) is elementwise. Not one fused kernel: the
read and its gradients are XLA around the GLA kernel's custom VJP (with its gate gradient formed
for the zero gates, then unused).
"""

import jax.numpy as jnp

from ..pallas import mosaic_tpu
from ..residuals import kept
from ..xla.numerics import ccq_correction, ccq_keys, resets
from ..xla.recurrences import diagonal_scan, fold_initial
from ..xla.types import CCQStats

f32 = jnp.float32
supports = mosaic_tpu.supports


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, interpret, config, chunk_size=64):
    """The CCQ read with its covariance on the Mosaic TPU GLA kernel; see `ccq_jax.ops.ccq_query`."""
    dtype = jnp.result_type(q, k)
    kh = ccq_keys(k, normalize_keys)  # fp32
    keys = kh.astype(dtype)
    # the GLA state is [key, value] = C^T, and C^T q = sum_j k^_j (k^_j . q) with values k^
    cov_q, cov_t = mosaic_tpu.chunked(q.astype(dtype), keys, keys, jnp.zeros(kh.shape, f32), scale=1.0,
                               initial_state=jnp.swapaxes(initial_stats.cov, 2, 3), docs=docs, interpret=interpret,
                               config=config, chunk_size=chunk_size)
    cov_q = kept(cov_q)  # the kernel's output, which the XLA read's backward needs
    carry = jnp.broadcast_to(~resets(docs)[:, :, None], lam.shape).astype(f32)  # [B, T, H]
    sums = (fold_initial(kh, carry[:, 0], initial_stats.key_sum.astype(f32)),
            fold_initial(jnp.ones_like(carry), carry[:, 0], initial_stats.count.astype(f32)))
    key_sum, count = diagonal_scan(carry, sums)
    qf = q.astype(f32)
    q_clean = qf - lam.astype(f32)[..., None] * ccq_correction(cov_q.astype(f32), key_sum, count, qf, centered)
    return q_clean.astype(q.dtype), CCQStats(jnp.swapaxes(cov_t, 2, 3), key_sum[:, -1], count[:, -1])
