"""The CCQ read on the Triton kernels, under one custom VJP: the covariance term is GLA's linear attention with
no gate and values k^ (`pallas.triton_linear.forward` / `backward`), the key sums and the cleaned query are
`pallas_kernels.ccq_read`'s.

The chunks' key totals are scanned across chunks in XLA (transposed for the backward); the key
normalisation with those totals, the cleaned query and all their gradients run in Pallas (the running
key sums inside chunks come from the covariance's `intra_scores`, which loads the key tiles anyway).
`read_forward` and `read_backward` are the VJP's halves, which the fused ops (`fused.py`) run around a
backbone.
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels import ccq_read

from ..dispatch import triton_support
from ..pallas import step
from ..pallas import triton_linear as linear
from ..pallas.layout import Launch, check_chunk, layout, pad, pad_state, per_chunk, recompute_from, width
from ..residuals import kept
from ..xla.numerics import L2_NORM_EPS, vary_like
from ..xla.recurrences import diagonal_scan, fold_initial
from ..xla.types import CCQStats
from . import reference

f32 = jnp.float32
supports = triton_support


def _key_scan(totals, init, keep):
    """The key sums and counts entering each chunk ([B, N, H, K], [B, N, H]) and their final values, from the
    chunks' totals `(sums, counts)` and the initial ones (a new document inside a chunk drops what entered it:
    keep [B, N]). Linear in (totals, init)."""
    leaving = diagonal_scan(keep, tuple(fold_initial(t, keep[:, 0], i) for t, i in zip(totals, init)))
    entering = tuple(jnp.concatenate([i[:, None], l[:, :-1]], axis=1) for i, l in zip(init, leaving))
    return entering, tuple(l[:, -1] for l in leaving)


def _statistics_keys(k, lay, chunk, normalize, run):
    """(the keys k^ of the CCQ statistics in k's dtype, the (sums [B, N, H, K] fp32, counts [B, N, H]) of the keys
    each chunk hands on to the next)."""
    kh, sums = ccq_read.statistics_keys(k, lay.writes, chunk=chunk, eps=L2_NORM_EPS if normalize else None, **run.kw)
    counts = jnp.sum(per_chunk(lay.writes, chunk), axis=2)
    return kh, (sums, jnp.broadcast_to(counts[..., None], sums.shape[:3]))


def read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize, run):
    """(outputs, residuals): the backward keeps the keys k^, their running sums inside chunks, C q (all in q's
    dtype) and the sums entering each chunk, and recomputes the covariance's states."""
    kh, totals = _statistics_keys(k, lay, chunk, normalize, run)
    (sum_in, count_in), final = _key_scan(totals, (sum0, count0), lay.keep)
    # the state is [key, value] = C^T: C q_t = sum_k q_tk S[k, :]
    cov_q, cov_t, scores, _, running = linear.forward(q, kh, kh, None, cov0, lay, 1.0, chunk, None, q.dtype, run,
                                                      key_sums=centered)
    q_clean = ccq_read.clean_query(q, running, cov_q, lam, lay.reads, lay.dd, sum_in, count_in, chunk=chunk,
                                   **run.kw)
    q_clean, kh, running, cov_q, scores, sum_in, count_in = kept((q_clean, kh, running, cov_q, scores, sum_in,
                                                                  count_in))
    return (q_clean, (cov_t, *final)), (q, k, kh, running, lam, cov0, lay, cov_q, scores, sum_in, count_in)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def read_vjp(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize, run):
    """(q_clean, (C^T, key sum, count) at the end) on padded inputs; the covariance state is kept as C^T."""
    return read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize, run)[0]


def read_backward(res, dqc, dstats, chunk, normalize, run, dk_rest=None):
    """(dq, dk, dlam, dcov0, dsum0, dcount0) of the read given the cotangents of q_clean and of the final
    statistics; dk_rest: the keys' gradient from a backbone reading them too, added on chip (`key_grad`)."""
    q, k, kh, running, lam, cov0, lay, cov_q, scores, sum_in, count_in = recompute_from(res)
    dcov_t, dfinal_sum, dfinal_count = dstats
    dq, dc, dlam, dm, dsum_in, dcount_in = ccq_read.clean_query_grad(
        dqc.astype(q.dtype), q, running, cov_q, lam, lay.reads, lay.dd, sum_in, count_in, chunk=chunk, **run.kw)
    scan = lambda totals, init: _key_scan(totals, init, lay.keep)
    # the scan is linear: its transpose takes the gradients of (entering, final) to those of (totals, init),
    # which have the same shapes
    cotangents = ((dsum_in, dcount_in), (dfinal_sum, dfinal_count))
    (dtotals, _), (dsum0, dcount0) = jax.linear_transpose(scan, *cotangents)(cotangents)
    dq, dkh, _, _, dcov0 = linear.backward(q, kh, kh, None, cov0, lay, scores, dc, dcov_t, 1.0, chunk, None, run,
                                           dq_rest=dq, shared_keys=True)
    dk = ccq_read.key_grad(k, dkh, dm, dtotals, lay.writes, lay.dd, chunk=chunk,
                           eps=L2_NORM_EPS if normalize else None, dk_rest=dk_rest, **run.kw)
    return dq, dk, dlam.astype(lam.dtype), dcov0, dsum0, dcount0


def _read_vjp_backward(chunk, centered, normalize, run, res, cts):
    dqc, dstats = cts
    return (*read_backward(res, dqc, dstats, chunk, normalize, run), None)


read_vjp.defvjp(read_forward, _read_vjp_backward)


def stats_inputs(initial_stats, kp, like):
    """(C^T, key sum, count) of the initial statistics, padded to the key width kp, as the read takes them
    (varying like the arrays `like` inside shard_map)."""
    dk = initial_stats.key_sum.shape[-1]
    cov0 = pad_state(jnp.swapaxes(initial_stats.cov, 2, 3), kp, kp)
    sum0 = jnp.pad(initial_stats.key_sum.astype(f32), [(0, 0), (0, 0), (0, kp - dk)])
    return vary_like((cov0, sum0, initial_stats.count.astype(f32)), like)


def stats_outputs(stats, dk):
    """The read's final (C^T, key sum, count), padding cut off, as `CCQStats`."""
    cov_t, key_sum, count = stats
    return CCQStats(jnp.swapaxes(cov_t, 2, 3)[:, :, :dk, :dk], key_sum[..., :dk], count)


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, interpret, config, chunk_size=64):
    """The CCQ read on the Triton kernels; see `ccq_jax.ops.ccq_query`."""
    run = Launch(interpret, config)
    b, t, h, dk = q.shape
    chunk = check_chunk(chunk_size, interpret)
    if step.one_token(q):  # a decode step: one kernel (`pallas.step`)
        return step.ccq_query(q, k, lam, centered=centered, normalize_keys=normalize_keys,
                              initial_stats=initial_stats, docs=docs, run=run, recurrent=reference.recurrent)
    tp, kp = t + (-t % chunk), width(dk)
    dtype = jnp.result_type(q, k)
    padded = [pad(x.astype(dtype), tp, kp) for x in (q, k)]
    q_clean, stats = read_vjp(*padded, pad(lam, tp), *stats_inputs(initial_stats, kp, padded),
                              layout(docs, chunk), chunk, centered, normalize_keys, run)
    return q_clean[:, :t, :, :dk], stats_outputs(stats, dk)
