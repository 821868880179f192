"""The Pallas backend of the ops (impl="pallas"): kernels from `pallas_kernels`, wired into custom VJPs.

This module pads to block shapes (T to a multiple of the chunk, K and V to powers of two
>= 16, with zeros that change nothing), turns the document index into per-token masks, and
chooses where kernels run: compiled through Triton on a GPU, interpreted on any other
backend (so CPUs run, and CI checks, the very same kernels). A TPU (Mosaic) lowering can be
added behind `_interpret` without touching callers.

Backward passes recompute the chunk states from the inputs (nothing of size `[B, H, N, K, V]`
is kept between forward and backward) and then run the state gradient backwards through the
chunks, as fla does:
  GLA and the CCQ covariance: all in Pallas (`pallas_kernels.linear_attention`).
  Gated delta rule: the two sequential passes, the output and the per-chunk gradients of q, k
    and the gates in Pallas (`pallas_kernels.delta_rule`, the last one's XLA twin `_delta_rest`); on a GPU
    its three state passes (the forward's, the backward's recompute of the states and the state gradient's)
    in Mosaic GPU where they qualify (`pallas_kernels.mosaic_delta_states`; the Triton twins otherwise, in
    interpret mode, and with `MOSAIC_STATE_PASSES` False);
    the per-chunk WY/UT algebra (T, then w and u; its gradient) in Pallas (`pallas_kernels.delta_wy`,
    its XLA twin `_delta_wy`).
  The CCQ read: the chunks' key totals' scan across chunks in XLA (transposed for the backward);
    the key normalisation with those totals, the cleaned query and all their gradients in Pallas
    (`pallas_kernels.ccq_read`; the running key sums inside chunks come from the covariance's
    `intra_scores`, which loads the key tiles anyway); `ccq_gla` and
    `ccq_gated_delta_rule` run it and the backbone under one custom VJP.
GLA forms its gates' in-chunk cumsum G in Pallas (`gated_inputs`, which also applies the gates to q and k
once for the state passes; the gated delta rule's per-head cumsum is XLA's `_chunk_cumsum`) and keeps G
(fp32, the size of g) instead of g for the backward, where `diagonal_dqk` applies them to q and k again.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ccq_jax.ops._common import HIGHEST, L2_NORM_EPS, vary_like
from ccq_jax.ops.chunk import _doc_masks, _masked_exp, _mm
from ccq_jax.ops.scan import _diagonal_scan, _fold_initial
from ccq_jax.ops.types import CCQStats
from pallas_kernels import ccq_read, delta_rule, delta_wy, mosaic_delta_states
from pallas_kernels import linear_attention as la
from pallas_kernels._tiles import SUB

f32 = jnp.float32
# The gated delta rule's state passes in Mosaic GPU where they qualify (False: the Triton twins, for A/B timing).
# Read while tracing: set it before the op's first call (jax caches traces).
MOSAIC_STATE_PASSES = True


def _interpret():
    """Kernels compile (Triton, Mosaic GPU) on a GPU and are interpreted on a CPU (tests); no other platform has
    them yet, and interpreting them there would be the slowest path there is: a ValueError instead."""
    platform = jax.default_backend()
    if platform not in ("gpu", "cpu"):
        raise ValueError(f"impl: 'pallas' has no kernels for platform {platform!r} yet (they compile on a GPU and "
                         f"run interpreted on a CPU); use impl='chunk' there")
    return platform == "cpu"


def _mosaic_state_pass(k, values, chunk, store, interpret):
    """Whether the gated delta rule's state pass over (k, values `[B, Tp, H, V]`: u, v_new or do) runs in Mosaic
    GPU."""
    return MOSAIC_STATE_PASSES and not interpret and mosaic_delta_states.supports(k, values, chunk, store)


class _Layout(NamedTuple):
    """Per-token masks over the padded sequence [B, Tp] and the per-chunk `keep` [B, N] (see
    `pallas_kernels.linear_attention`)."""

    reads: jax.Array
    writes: jax.Array
    keep: jax.Array  # [B, N]: per chunk
    dd: jax.Array


def _layout(docs, chunk):
    m = _doc_masks(docs, chunk)
    flat = lambda x: x.reshape(docs.shape[0], -1).astype(f32)
    dd = jnp.pad(docs, [(0, 0), (0, -docs.shape[1] % chunk)], mode="edge")
    return _Layout(flat(m.reads_state), flat(m.writes_state), flat(m.keep_state), dd)


def _same_doc_causal(dd, chunk):
    """[B, N, C, C] bool: j <= i inside a chunk and in the same document (dd: the padded document index)."""
    d = dd.reshape(dd.shape[0], -1, chunk)
    return jnp.tril(jnp.ones((chunk, chunk), bool)) & (d[..., :, None] == d[..., None, :])


# The gated delta rule on a GPU: at chunk 128 the H200 refused a kernel's 320,000 bytes of shared memory (232,448
# available) at compilation
GPU_DELTA_MAX_CHUNK = 64


def _check_chunk(chunk, gpu_max=None):
    """chunk_size as the kernels take it; gpu_max: the largest that compiles for a GPU (None: no limit)."""
    if chunk < SUB or chunk & (chunk - 1):
        raise ValueError(f"chunk_size: impl='pallas' needs a power of two >= {SUB}, got {chunk}")
    if gpu_max is not None and chunk > gpu_max and not _interpret():
        raise ValueError(f"chunk_size: impl='pallas' runs the gated delta rule at chunk sizes up to {gpu_max} on a "
                         f"GPU (larger chunks need more shared memory than an H100/H200 block has), got {chunk}")
    return chunk


def _width(d):
    """Feature width after padding: a power of two >= 16 (Triton tiles and tensor-core dots)."""
    return max(16, 1 << (d - 1).bit_length())


def _pad(x, length, width=None):
    """Zero-pad [B, T, H, ...] to `length` tokens (and the last axis to `width`)."""
    pads = [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    if width is not None:
        pads[-1] = (0, width - x.shape[-1])
    return jnp.pad(x, pads)


def _pad_state(s, kp, vp):
    return jnp.pad(s.astype(f32), [(0, 0), (0, 0), (0, kp - s.shape[2]), (0, vp - s.shape[3])])


def _chunk_cumsum(g, chunk):
    """Inclusive cumsum of the log gates inside each chunk, fp32 ([B, Tp, H, *])."""
    b, tp = g.shape[:2]
    gc = g.astype(f32).reshape(b, tp // chunk, chunk, *g.shape[2:])
    return jnp.cumsum(gc, axis=2).reshape(g.shape)


def _recompute_from(residuals):
    """The residuals behind an optimization barrier, so that what a backward pass recomputes from them (the
    states, w and u, ...) is not merged with the forward's identical computation by XLA, which would keep the
    forward's results alive until the backward instead (the Gated DeltaNet states of every layer)."""
    return jax.lax.optimization_barrier(residuals)


# ---- GLA form (per-channel gates) and the undecayed covariance of the CCQ read -------------------


def _la_forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, key_sums=False):
    """(o, final state, the intra-chunk scores, G or None, the keys' running sums inside chunks (`key_sums`: see
    `intra_scores`) or None)."""
    interpret = _interpret()
    if gate:  # per-channel gates applied to q and k once, 0/1 masks included (gated_inputs, which forms G)
        G, q_read, k_write = la.gated_inputs(g, q, k, lay.reads, lay.writes, chunk=chunk, interpret=interpret)
        writes = None
    else:  # the kernels apply the masks
        G, q_read, k_write, writes = None, q, k, lay.writes
    scores = la.intra_scores(q, k, G, lay.dd, chunk=chunk, gate=gate, interpret=interpret, key_sums=key_sums)
    scores, running = scores if key_sums else (scores, None)
    if gate:
        scores = la.diagonal_scores(q, k, G, lay.dd, scores, chunk=chunk, interpret=interpret)
    states, final = la.chunk_states(k_write, v, G, writes, lay.keep, h0, chunk=chunk, gate=gate, store=q.dtype,
                                    interpret=interpret)
    o = la.chunk_out(q_read, None, lay.reads, states, scores, v, chunk=chunk, gate=None, transpose_scores=False,
                     s_inter=scale, s_intra=scale, out_dtype=out_dtype, interpret=interpret)
    return o, final, scores, G, running


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9))
def _linear_attention(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype):
    """o = scale * S_t^T q_t with S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T (no decay when gate is None)."""
    o, final, *_ = _la_forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype)
    return o, final


def _la_fwd(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype):
    """Keeps the gates' in-chunk cumsum G (fp32, the size of g, kept instead of it) for the backward."""
    o, final, scores, G, _ = _la_forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype)
    return (o, final), (q, k, v, G, h0, lay, scores)


def _la_backward(q, k, v, G, h0, lay, scores, do, dfinal, scale, chunk, gate, dq_rest=None, shared_keys=False):
    """(dq, dk in q's dtype, dv in v's dtype, dg fp32 or None, dh0) of `_linear_attention`, the states
    recomputed; G: the gates' in-chunk cumsum; dq_rest (or None): another share of dq, added on chip.
    shared_keys (no gates, v is k: the CCQ covariance): dk is the gradient of both uses and dv None."""
    interpret = _interpret()
    common = dict(chunk=chunk, gate=gate, interpret=interpret)
    dscores = la.chunk_dscores(do, v, lay.dd, chunk=chunk, scale=scale, interpret=interpret)
    if gate:  # the diagonal blocks' dq and dk, and the gated q and k from the same tiles (as in _la_forward)
        dq_diag, dk_diag, q_read, k_write = la.diagonal_dqk(q, k, G, dscores, lay.reads, lay.writes, chunk=chunk,
                                                            interpret=interpret)
        diagonal, reads, writes = (dq_diag, dk_diag), None, None
    else:
        diagonal, q_read, k_write, reads, writes = None, q, k, lay.reads, lay.writes
    states, _ = la.chunk_states(k_write, v, G, writes, lay.keep, h0, store=q.dtype, **common)
    dstates, dh0 = la.chunk_states(q_read, do, G, reads, lay.keep, dfinal, reverse=True, scale=scale, store=q.dtype,
                                   **common)
    dv = None if shared_keys else la.chunk_out(k_write, None, lay.writes, dstates, scores, do, chunk=chunk, gate=None,
                                              transpose_scores=True, s_inter=1.0, s_intra=scale, out_dtype=v.dtype,
                                              interpret=interpret)
    dq, dk, dg = la.chunk_dqk(q, k, v, do, G, lay.reads, lay.writes, lay.keep, states, dstates, dscores, diagonal,
                              scale=scale, dq_rest=dq_rest, scores=scores if shared_keys else None, **common)
    return dq, dk, dv, dg, dh0


def _la_bwd(scale, chunk, gate, out_dtype, res, cts):
    q, k, v, G, h0, lay, scores = _recompute_from(res)
    do, dfinal = cts
    return (*_la_backward(q, k, v, G, h0, lay, scores, do.astype(q.dtype), dfinal, scale, chunk, gate), None)


_linear_attention.defvjp(_la_fwd, _la_bwd)


def _backbone_inputs(q, k, v, initial_state, chunk_size, gpu_max_chunk=None):
    """Padding shared by the backbones: (chunk, Tp, padded K, [q, k, v] in one dtype, h0, undo), where
    undo(o, final_state) cuts the padding off again; gpu_max_chunk: `_check_chunk`'s gpu_max."""
    t, dk, dv = q.shape[1], q.shape[-1], v.shape[-1]
    chunk = _check_chunk(chunk_size, gpu_max_chunk)
    tp, kp, vp = t + (-t % chunk), _width(dk), _width(dv)
    dtype = jnp.result_type(q, k, v)
    padded = [_pad(x.astype(dtype), tp, w) for x, w in ((q, kp), (k, kp), (v, vp))]
    undo = lambda o, final: (o[:, :t, :, :dv], final[:, :, :dk, :dv])
    # the state varies like the inputs inside shard_map (the custom VJPs' cotangents must match their inputs)
    return chunk, tp, kp, padded, vary_like(_pad_state(initial_state, kp, vp), padded), undo


def gla(q, k, v, g, *, scale, initial_state, docs, chunk_size=64):
    """Chunked GLA in Pallas; see `ccq_jax.ops.gla`."""
    chunk, tp, kp, qkv, h0, undo = _backbone_inputs(q, k, v, initial_state, chunk_size)
    return undo(*_linear_attention(*qkv, _pad(g.astype(f32), tp, kp), h0, _layout(docs, chunk), scale, chunk,
                                   "channel", v.dtype))


# ---- the CCQ read -----------------------------------------------------------------------------------


def _key_scan(totals, init, keep):
    """The key sums and counts entering each chunk ([B, N, H, K], [B, N, H]) and their final values, from the
    chunks' totals `(sums, counts)` and the initial ones (a new document inside a chunk drops what entered it:
    keep [B, N]). Linear in (totals, init)."""
    leaving = _diagonal_scan(keep, tuple(_fold_initial(t, keep[:, 0], i) for t, i in zip(totals, init)))
    entering = tuple(jnp.concatenate([i[:, None], l[:, :-1]], axis=1) for i, l in zip(init, leaving))
    return entering, tuple(l[:, -1] for l in leaving)


def _ccq_keys(k, lay, chunk, normalize):
    """(the keys k^ of the CCQ statistics in k's dtype, the (sums [B, N, H, K] fp32, counts [B, N, H]) of the keys
    each chunk hands on to the next)."""
    kh, sums = ccq_read.statistics_keys(k, lay.writes, chunk=chunk, eps=L2_NORM_EPS if normalize else None,
                                        interpret=_interpret())
    counts = jnp.sum(_per_chunk(lay.writes, chunk), axis=2)
    return kh, (sums, jnp.broadcast_to(counts[..., None], sums.shape[:3]))


def _ccq_read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize):
    """(outputs, residuals): the backward keeps the keys k^, their running sums inside chunks, C q (all in q's
    dtype) and the sums entering each chunk, and recomputes the covariance's states."""
    interpret = _interpret()
    kh, totals = _ccq_keys(k, lay, chunk, normalize)
    (sum_in, count_in), final = _key_scan(totals, (sum0, count0), lay.keep)
    # the state is [key, value] = C^T: C q_t = sum_k q_tk S[k, :]
    cov_q, cov_t, scores, _, running = _la_forward(q, kh, kh, None, cov0, lay, 1.0, chunk, None, q.dtype,
                                                   key_sums=centered)
    q_clean = ccq_read.clean_query(q, running, cov_q, lam, lay.reads, lay.dd, sum_in, count_in, chunk=chunk,
                                   interpret=interpret)
    return (q_clean, (cov_t, *final)), (q, k, kh, running, lam, cov0, lay, cov_q, scores, sum_in, count_in)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9))
def _ccq_read(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize):
    """(q_clean, (C^T, key sum, count) at the end) on padded inputs; the covariance state is kept as C^T."""
    return _ccq_read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize)[0]


def _ccq_read_backward(res, dqc, dstats, chunk, normalize, dk_rest=None):
    """(dq, dk, dlam, dcov0, dsum0, dcount0) of `_ccq_read` given the cotangents of q_clean and of the final
    statistics; dk_rest: the keys' gradient from a backbone reading them too, added on chip (`key_grad`)."""
    q, k, kh, running, lam, cov0, lay, cov_q, scores, sum_in, count_in = _recompute_from(res)
    dcov_t, dfinal_sum, dfinal_count = dstats
    interpret = _interpret()
    dq, dc, dlam, dm, dsum_in, dcount_in = ccq_read.clean_query_grad(
        dqc.astype(q.dtype), q, running, cov_q, lam, lay.reads, lay.dd, sum_in, count_in, chunk=chunk,
        interpret=interpret)
    scan = lambda totals, init: _key_scan(totals, init, lay.keep)
    # the scan is linear: its transpose takes the gradients of (entering, final) to those of (totals, init),
    # which have the same shapes
    cotangents = ((dsum_in, dcount_in), (dfinal_sum, dfinal_count))
    (dtotals, _), (dsum0, dcount0) = jax.linear_transpose(scan, *cotangents)(cotangents)
    dq, dkh, _, _, dcov0 = _la_backward(q, kh, kh, None, cov0, lay, scores, dc, dcov_t, 1.0, chunk, None, dq_rest=dq,
                                        shared_keys=True)
    dk = ccq_read.key_grad(k, dkh, dm, dtotals, lay.writes, lay.dd, chunk=chunk,
                           eps=L2_NORM_EPS if normalize else None, interpret=interpret, dk_rest=dk_rest)
    return dq, dk, dlam.astype(lam.dtype), dcov0, dsum0, dcount0


def _ccq_read_bwd(chunk, centered, normalize, res, cts):
    dqc, dstats = cts
    return (*_ccq_read_backward(res, dqc, dstats, chunk, normalize), None)


_ccq_read.defvjp(_ccq_read_forward, _ccq_read_bwd)


def _stats_inputs(initial_stats, kp):
    """(C^T, key sum, count) of the initial statistics, padded to the key width kp, as `_ccq_read` takes them."""
    dk = initial_stats.key_sum.shape[-1]
    cov0 = _pad_state(jnp.swapaxes(initial_stats.cov, 2, 3), kp, kp)
    sum0 = jnp.pad(initial_stats.key_sum.astype(f32), [(0, 0), (0, 0), (0, kp - dk)])
    return cov0, sum0, initial_stats.count.astype(f32)


def _stats_outputs(stats, dk):
    """`_ccq_read`'s final (C^T, key sum, count), padding cut off, as `CCQStats`."""
    cov_t, key_sum, count = stats
    return CCQStats(jnp.swapaxes(cov_t, 2, 3)[:, :, :dk, :dk], key_sum[..., :dk], count)


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, chunk_size=64):
    """The CCQ read in Pallas: the covariance term is an undecayed linear attention with values k^, the key
    sums and the cleaned query are `pallas_kernels.ccq_read`'s."""
    b, t, h, dk = q.shape
    chunk = _check_chunk(chunk_size)
    tp, kp = t + (-t % chunk), _width(dk)
    dtype = jnp.result_type(q, k)
    padded = [_pad(x.astype(dtype), tp, kp) for x in (q, k)]
    q_clean, stats = _ccq_read(*padded, _pad(lam, tp), *vary_like(_stats_inputs(initial_stats, kp), padded),
                               _layout(docs, chunk), chunk, centered, normalize_keys)
    return q_clean[:, :t, :, :dk], _stats_outputs(stats, dk)


# ---- the CCQ read feeding a backbone ---------------------------------------------------------------


class _Backbone(NamedTuple):
    """A backbone's custom-VJP halves on padded inputs: forward(q, k, *rest, h0, lay) -> ((o, final), residuals);
    backward(residuals, (do, dfinal)) -> (dq, dk, *drest, dh0, None)."""

    forward: object
    backward: object


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _ccq_backbone(backbone, chunk, centered, normalize, q, k, lam, cov0, sum0, count0, rest, h0, lay):
    """(o, final state, final statistics): the backbone reading with the CCQ-cleaned query on padded inputs (rest:
    its other inputs, v first). One VJP for both, so that the keys' two gradients (the backbone's and the
    read's) are summed on chip (`key_grad`) instead of by XLA."""
    return _ccq_backbone_fwd(backbone, chunk, centered, normalize, q, k, lam, cov0, sum0, count0, rest, h0, lay)[0]


def _ccq_backbone_fwd(backbone, chunk, centered, normalize, q, k, lam, cov0, sum0, count0, rest, h0, lay):
    (q_clean, stats), read_res = _ccq_read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize)
    (o, final), backbone_res = backbone.forward(q_clean, k, *rest, h0, lay)
    return (o, final, stats), (read_res, backbone_res)


def _ccq_backbone_bwd(backbone, chunk, centered, normalize, res, cts):
    read_res, backbone_res = res
    do, dfinal, dstats = cts
    dq_clean, dk_backbone, *drest, dh0, _ = backbone.backward(backbone_res, (do, dfinal))
    read_grads = _ccq_read_backward(read_res, dq_clean, dstats, chunk, normalize, dk_rest=dk_backbone)
    return (*read_grads, tuple(drest), dh0, None)


_ccq_backbone.defvjp(_ccq_backbone_fwd, _ccq_backbone_bwd)


def _ccq_with(backbone, inputs, rest, lam, initial_stats, centered, normalize_keys, docs):
    """A fused CCQ op around `_ccq_backbone`, given `_backbone_inputs`' padding and the backbone's other inputs
    `rest` (padded): o, (final state, final statistics)."""
    chunk, tp, kp, (q, k, _), h0, undo = inputs
    o, final, stats = _ccq_backbone(backbone, chunk, centered, normalize_keys, q, k, _pad(lam, tp),
                                    *vary_like(_stats_inputs(initial_stats, kp), (q, k)), rest, h0,
                                    _layout(docs, chunk))
    o, final = undo(o, final)
    return o, (final, _stats_outputs(stats, initial_stats.key_sum.shape[-1]))


def ccq_gla(q, k, v, g, lam, *, scale, initial_state, initial_stats, centered, normalize_keys, docs, chunk_size=64):
    """`ccq_query` feeding `gla` in Pallas, under one custom VJP (`_ccq_backbone`)."""
    inputs = _backbone_inputs(q, k, v, initial_state, chunk_size)
    chunk, tp, kp, (_, _, v_padded), _, _ = inputs
    backbone = _Backbone(lambda *args: _la_fwd(*args, scale, chunk, "channel", v.dtype),
                         lambda res, cts: _la_bwd(scale, chunk, "channel", v.dtype, res, cts))
    return _ccq_with(backbone, inputs, (v_padded, _pad(g.astype(f32), tp, kp)), lam, initial_stats, centered,
                     normalize_keys, docs)


# ---- gated delta rule -------------------------------------------------------------------------------


class _DeltaRest(NamedTuple):
    """What the gated delta rule computes inside chunks (fp32) besides w and u, given q, k and G."""

    q_read: jax.Array  # [B, Tp, H, K]  q exp(G) reads
    scores: jax.Array  # [B, H, Tp, C]  (q_i . k_j) exp(G_i - G_j), causal, one document
    k_end: jax.Array  # [B, Tp, H, K]  k exp(G_last - G) writes
    decay: jax.Array  # [B, N, H]  exp(G_last) keep


def _per_chunk(x, chunk):
    """[B, Tp, *] -> [B, N, C, *]."""
    return x.reshape(x.shape[0], -1, chunk, *x.shape[2:])


def _pair_decays(G, lay, chunk):
    """(causal [B, N, C, C, 1]: j <= i in one document, exp(G_i - G_j) there [B, N, C, C, H]); G in chunks."""
    causal = _same_doc_causal(lay.dd, chunk)[..., None]
    return causal, _masked_exp(G[:, :, :, None] - G[:, :, None, :], causal)


def _qk(a, c, chunk):
    """(a_i . c_j) inside each chunk [B, N, C, C, H]: operands in their dtype, exact products, fp32 sums."""
    return _mm("bnihk,bnjhk->bnijh", _per_chunk(a, chunk), _per_chunk(c, chunk), a.dtype)


def _delta_wy(k, v, G, beta, lay, chunk):
    """w = T (beta exp(G) reads k), u = T (beta v) with T = (I + A)^-1 (docs/design.md, "Gated delta rule"),
    fp32, in XLA: the reference twin of `delta_wy` (G: the in-chunk cumsum of the log gates)."""
    b, tp, h = G.shape
    f = lambda x: _per_chunk(x, chunk).astype(f32)
    kc, vc, bc, Gc = f(k), f(v), f(beta), _per_chunk(G, chunk)  # [B, N, C, H, *]
    reads = _per_chunk(lay.reads, chunk)[..., None]
    causal, decay_ij = _pair_decays(Gc, lay, chunk)
    strict = causal & ~jnp.eye(chunk, dtype=bool)[:, :, None]
    kk = jnp.where(strict, bc[:, :, :, None] * _qk(k, k, chunk) * decay_ij, 0)
    eye = jnp.eye(chunk, dtype=f32)
    inverse = jax.lax.linalg.triangular_solve(jnp.moveaxis(kk, 4, 2) + eye, jnp.broadcast_to(eye, kk.shape[:2] + (
        h, chunk, chunk)), left_side=True, lower=True, unit_diagonal=True)  # [B, N, H, C, C]
    apply = lambda rhs: jnp.einsum("bnhij,bnjhd->bnihd", inverse, rhs, precision=HIGHEST).reshape(
        b, tp, h, rhs.shape[-1])
    return apply(kc * (bc * jnp.exp(Gc) * reads)[..., None]), apply(bc[..., None] * vc)


class _HeadFactors(NamedTuple):
    """The per-head gates' factors of the gated delta rule's state passes, fp32 (G: the in-chunk cumsum)."""

    read: jax.Array  # [B, Tp, H]  exp(G) reads: a query against the state entering its chunk
    write: jax.Array  # [B, Tp, H]  exp(G_last - G) writes: a token's write decayed to its chunk's end
    decay: jax.Array  # [B, N, H]  exp(G_last) keep: how the state entering a chunk survives it


def _head_factors(G, lay, chunk):
    """`_HeadFactors` of the per-head in-chunk cumsum G [B, Tp, H] under the layout's masks."""
    b, tp, h = G.shape
    Gc = _per_chunk(G, chunk)
    reads, writes = (_per_chunk(x, chunk)[..., None] for x in (lay.reads, lay.writes))
    G_last = Gc[:, :, -1:]
    flat = lambda x: x.reshape(b, tp, h)
    return _HeadFactors(flat(jnp.exp(Gc) * reads), flat(jnp.exp(G_last - Gc) * writes),
                        jnp.exp(G_last[:, :, 0]) * lay.keep[..., None])


def _delta_rest(q, k, G, lay, chunk):
    """The rest of the per-chunk algebra in XLA (docs/design.md, "Gated delta rule"): the reference twin whose
    autodiff `delta_rule.delta_dqkwg` computes."""
    b, tp, h = G.shape
    _, decay_ij = _pair_decays(_per_chunk(G, chunk), lay, chunk)
    scores = _qk(q, k, chunk) * decay_ij
    factors = _head_factors(G, lay, chunk)
    return _DeltaRest(
        q_read=q.astype(f32) * factors.read[..., None],
        scores=jnp.moveaxis(scores, 4, 1).reshape(b, h, tp, chunk),
        k_end=k.astype(f32) * factors.write[..., None],
        decay=factors.decay,
    )


def _delta_forward(q, k, v, g, beta, h0, lay, scale, chunk):
    """(o, final state, (the chunks' T = (I + A)^-1 fp32, v_new, the intra-chunk scores)): the last three are what
    the backward keeps."""
    interpret = _interpret()
    G = _chunk_cumsum(g, chunk)
    inverse = delta_wy.wy_inverse(k, G, beta, lay.dd, chunk=chunk, interpret=interpret)
    w, u = delta_wy.wy_apply(inverse, k, v, G, beta, lay.reads, chunk=chunk, interpret=interpret)
    factors = _head_factors(G, lay, chunk)
    if _mosaic_state_pass(k, u, chunk, k.dtype, interpret):
        states, v_new, final = mosaic_delta_states.state_pass(w, u, k, factors.write, factors.decay, h0,
                                                              chunk=chunk, store=k.dtype)
    else:
        states, v_new, final = delta_rule.delta_states(w, u, k, factors.write, factors.decay, h0, chunk=chunk,
                                                       store=k.dtype, interpret=interpret)
    scores = la.intra_scores(q, k, G, lay.dd, chunk=chunk, gate="head", interpret=interpret)
    o = la.chunk_out(q, G, lay.reads, states, scores, v_new, chunk=chunk, gate="head",
                     transpose_scores=False, s_inter=scale, s_intra=scale, out_dtype=v.dtype, interpret=interpret)
    return o, final, (inverse, v_new, scores)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _delta_rule(q, k, v, g, beta, h0, lay, scale, chunk):
    o, final, _ = _delta_forward(q, k, v, g, beta, h0, lay, scale, chunk)
    return o, final


def _dr_fwd(q, k, v, g, beta, h0, lay, scale, chunk):
    """Keeps the chunks' T (fp32 [B, Tp, H, C]: half of k's bytes for bf16 k at C = 64, K = 256), from which
    the backward forms w (`delta_wy.wy_apply`) instead of solving again, v_new (v's bytes), from which it forms
    the states entering the chunks again in a plain state pass (`chunk_states`, without the delta rule's w S
    product, which its sequential loop would wait for), and the intra-chunk scores (fp32 [B, H, Tp, C])."""
    o, final, kept = _delta_forward(q, k, v, g, beta, h0, lay, scale, chunk)
    return (o, final), (q, k, v, g, beta, h0, lay, *kept)


def _dr_bwd(scale, chunk, res, cts):
    q, k, v, g, beta, h0, lay, inverse, v_new, scores = _recompute_from(res)
    do, dfinal = cts
    do = do.astype(q.dtype)
    interpret = _interpret()
    G, cumsum_vjp = jax.vjp(lambda g: _chunk_cumsum(g, chunk), g)
    w, _ = delta_wy.wy_apply(inverse, k, None, G, beta, lay.reads, chunk=chunk, interpret=interpret)
    factors = _head_factors(G, lay, chunk)
    if _mosaic_state_pass(k, v_new, chunk, k.dtype, interpret):
        states, _, _ = mosaic_delta_states.state_pass(None, v_new, k, factors.write, factors.decay, h0,
                                                      chunk=chunk, store=k.dtype)
    else:
        states, _ = la.chunk_states(k, v_new, None, factors.write, factors.decay, h0, chunk=chunk, gate=None,
                                    store=k.dtype, interpret=interpret)
    dv_local = la.chunk_out(k, None, None, None, scores, do, chunk=chunk, gate=None,
                            transpose_scores=True, s_inter=0.0, s_intra=scale, out_dtype=q.dtype, interpret=interpret)
    if _mosaic_state_pass(k, do, chunk, q.dtype, interpret):  # w and dv_local come in k's and q's dtype
        dstates, dv_new, dh0 = mosaic_delta_states.state_gradient_pass(q, k, w, do, dv_local, *factors, dfinal,
                                                                       chunk=chunk, scale=scale, store=q.dtype)
    else:
        dstates, dv_new, dh0 = delta_rule.delta_dstates(q, k, w, do, dv_local, *factors, dfinal, chunk=chunk,
                                                        scale=scale, store=q.dtype, interpret=interpret)
    dscores = la.chunk_dscores(do, v_new, lay.dd, chunk=chunk, scale=scale, interpret=interpret)
    dq, dk, dw, dG = delta_rule.delta_dqkwg(q, k, v_new, do, dv_new, G, dscores, lay.reads, lay.writes, lay.keep,
                                            states, dstates, chunk=chunk, scale=scale, interpret=interpret)
    # w and u's share in one Pallas kernel, given the chunks' T (it adds dk's other share)
    dk, dv, dbeta, dG_wy = delta_wy.wy_gradient(k, v, G, beta, lay.reads, lay.dd, inverse, dw,
                                                dv_new.astype(k.dtype), dk, chunk=chunk, interpret=interpret)
    (dg,) = cumsum_vjp(dG + dG_wy)
    return dq, dk, dv.astype(v.dtype), dg.astype(g.dtype), dbeta.astype(beta.dtype), dh0, None


_delta_rule.defvjp(_dr_fwd, _dr_bwd)


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, chunk_size=64):
    """Chunked gated delta rule in Pallas (+ XLA for part of the per-chunk algebra); see `ops.gated_delta_rule`."""
    chunk, tp, _, qkv, h0, undo = _backbone_inputs(q, k, v, initial_state, chunk_size, GPU_DELTA_MAX_CHUNK)
    return undo(*_delta_rule(*qkv, _pad(g, tp), _pad(beta, tp), h0, _layout(docs, chunk), scale, chunk))


def ccq_gated_delta_rule(q, k, v, g, beta, lam, *, scale, initial_state, initial_stats, centered, normalize_keys,
                         docs, chunk_size=64):
    """`ccq_query` feeding `gated_delta_rule` in Pallas, under one custom VJP (`_ccq_backbone`)."""
    inputs = _backbone_inputs(q, k, v, initial_state, chunk_size, GPU_DELTA_MAX_CHUNK)
    chunk, tp, _, (_, _, v_padded), _, _ = inputs
    backbone = _Backbone(lambda *args: _dr_fwd(*args, scale, chunk), lambda res, cts: _dr_bwd(scale, chunk, res, cts))
    return _ccq_with(backbone, inputs, (v_padded, _pad(g, tp), _pad(beta, tp)), lam, initial_stats, centered,
                     normalize_keys, docs)
