"""The chunked linear attention on the Triton kernels of `pallas_kernels.linear_attention`, under one custom VJP:
GLA's backbone (per-channel gates, `gla.pallas_triton`) and, with no gate and values k^, the CCQ read's covariance
term (`ccq_query.pallas_triton` runs `forward` and `backward`).

The gates' in-chunk cumsum G is formed in Pallas (`gated_inputs`, which also applies the gates
to q and k once for the state passes) and kept (fp32, the size of g) instead of g for the
backward, where `diagonal_dqk` applies them to q and k again. The backward recomputes the chunk
states from the inputs (nothing of size `[B, H, N, K, V]` is kept between forward and backward)
and runs the state gradient backwards through the chunks, as fla does.
"""

import functools

import jax

from pallas_kernels import linear_attention as la
from pallas_kernels import linear_attention_grad as la_grad

from ..residuals import kept
from .layout import recompute_from


def forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, run, key_sums=False):
    """(o, final state, the intra-chunk scores, G or None, the keys' running sums inside chunks (`key_sums`: see
    `intra_scores`) or None); run: the call's `Launch`."""
    if gate:  # per-channel gates applied to q and k once, 0/1 masks included (gated_inputs, which forms G)
        G, q_read, k_write = la.gated_inputs(g, q, k, lay.reads, lay.writes, chunk=chunk, **run.kw)
        writes = None
    else:  # the kernels apply the masks
        G, q_read, k_write, writes = None, q, k, lay.writes
    scores = la.intra_scores(q, k, G, lay.dd, chunk=chunk, gate=gate, key_sums=key_sums, **run.kw)
    scores, running = scores if key_sums else (scores, None)
    if gate:
        scores = la.diagonal_scores(q, k, G, lay.dd, scores, chunk=chunk, **run.kw)
    states, final = la.chunk_states(k_write, v, G, writes, lay.keep, h0, chunk=chunk, gate=gate, store=q.dtype,
                                    **run.kw)
    o = la.chunk_out(q_read, None, lay.reads, states, scores, v, chunk=chunk, gate=None, transpose_scores=False,
                     s_inter=scale, s_intra=scale, out_dtype=out_dtype, **run.kw)
    return o, final, scores, G, running


def backward(q, k, v, G, h0, lay, scores, do, dfinal, scale, chunk, gate, run, dq_rest=None, shared_keys=False):
    """(dq, dk in q's dtype, dv in v's dtype, dg fp32 or None, dh0) of the linear attention, the states
    recomputed; G: the gates' in-chunk cumsum; dq_rest (or None): another share of dq, added on chip.
    shared_keys (no gates, v is k: the CCQ covariance): dk is the gradient of both uses and dv None."""
    dscores = la_grad.chunk_dscores(do, v, lay.dd, chunk=chunk, scale=scale, **run.kw)
    if gate:  # the diagonal blocks' dq and dk, and the gated q and k from the same tiles (as in forward)
        dq_diag, dk_diag, q_read, k_write = la_grad.diagonal_dqk(q, k, G, dscores, lay.reads, lay.writes, chunk=chunk,
                                                            **run.kw)
        diagonal, reads, writes = (dq_diag, dk_diag), None, None
    else:
        diagonal, q_read, k_write, reads, writes = None, q, k, lay.reads, lay.writes
    states, _ = la.chunk_states(k_write, v, G, writes, lay.keep, h0, chunk=chunk, gate=gate, store=q.dtype, **run.kw)
    dstates, dh0 = la.chunk_states(q_read, do, G, reads, lay.keep, dfinal, chunk=chunk, gate=gate, reverse=True,
                                   scale=scale, store=q.dtype, **run.kw)
    dv = None if shared_keys else la.chunk_out(k_write, None, lay.writes, dstates, scores, do, chunk=chunk, gate=None,
                                              transpose_scores=True, s_inter=1.0, s_intra=scale, out_dtype=v.dtype,
                                              **run.kw)
    dq, dk, dg = la_grad.chunk_dqk(q, k, v, do, G, lay.reads, lay.writes, lay.keep, states, dstates, dscores, diagonal,
                              chunk=chunk, gate=gate, scale=scale, dq_rest=dq_rest,
                              scores=scores if shared_keys else None, **run.kw)
    return dq, dk, dv, dg, dh0


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9, 10))
def linear_attention(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, run):
    """o = scale * S_t^T q_t with S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T (no decay when gate is None)."""
    o, final, *_ = forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, run)
    return o, final


def vjp_forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, run):
    """Keeps the gates' in-chunk cumsum G (fp32, the size of g, kept instead of it) for the backward."""
    o, final, scores, G, _ = forward(q, k, v, g, h0, lay, scale, chunk, gate, out_dtype, run)
    return (o, final), (q, k, v, kept(G), h0, lay, kept(scores))


def vjp_backward(scale, chunk, gate, out_dtype, run, res, cts):
    q, k, v, G, h0, lay, scores = recompute_from(res)
    do, dfinal = cts
    return (*backward(q, k, v, G, h0, lay, scores, do.astype(q.dtype), dfinal, scale, chunk, gate, run), None)


linear_attention.defvjp(vjp_forward, vjp_backward)
