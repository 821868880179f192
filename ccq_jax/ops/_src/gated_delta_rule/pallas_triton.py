"""The gated delta rule on the Triton kernels, under one custom VJP that takes its three state passes as a value.

Per chunk, the WY/UT algebra (T = (I + A)^-1, then w and u; its gradient) runs in
`pallas_kernels.delta_wy`, the output and the per-chunk gradients of q, k and the gates in
`pallas_kernels.delta_rule` and `linear_attention`; the gates' per-head cumsum is XLA's. The three
sequential passes over the chunks (the forward's, the backward's recompute of the states, the state
gradient's) are a `StatePasses` value: `TRITON_PASSES` here, `pallas_mosaic_gpu.MOSAIC_GPU_PASSES`
there. The backward recomputes the states from the inputs and the chunks' T.
"""

import functools
from typing import Callable, NamedTuple

import jax

from pallas_kernels import delta_rule, delta_wy
from pallas_kernels import linear_attention as la
from pallas_kernels import linear_attention_grad as la_grad

from ..dispatch import triton_support
from ..pallas import step
from ..pallas.layout import Launch, backbone_inputs, check_chunk, chunk_cumsum, floored, layout, pad, recompute_from
from ..residuals import kept
from . import reference
from .factors import head_factors

supports = triton_support
# The H200 refused a kernel's 320,000 bytes of shared memory (232,448 available) at chunk 128 at compilation
GPU_MAX_CHUNK = 64


class StatePasses(NamedTuple):
    """The gated delta rule's three sequential passes over the chunks, on one backend.

    forward(w, u, k, write, decay, h0, chunk, store, run) -> (states, v_new, final);
    recompute(v_new, k, write, decay, h0, chunk, store, run) -> the states entering each chunk;
    gradient(q, k, w, do, dv_local, read, write, decay, dfinal, chunk, scale, store, run) -> (dstates, dv_new, dh0).
    """

    forward: Callable
    recompute: Callable
    gradient: Callable


def _forward_pass(w, u, k, write, decay, h0, chunk, store, run):
    return delta_rule.delta_states(w, u, k, write, decay, h0, chunk=chunk, store=store, **run.kw)


def _recompute_pass(v_new, k, write, decay, h0, chunk, store, run):
    """The plain state pass over v_new (without the delta rule's w S product, which its loop would wait for)."""
    return la.chunk_states(k, v_new, None, write, decay, h0, chunk=chunk, gate=None, store=store, **run.kw)[0]


def _gradient_pass(q, k, w, do, dv_local, read, write, decay, dfinal, chunk, scale, store, run):
    return delta_rule.delta_dstates(q, k, w, do, dv_local, read, write, decay, dfinal, chunk=chunk, scale=scale,
                                    store=store, **run.kw)


TRITON_PASSES = StatePasses(_forward_pass, _recompute_pass, _gradient_pass)


def _forward(q, k, v, g, beta, h0, lay, scale, chunk, passes, run):
    """(o, final state, (the chunks' T = (I + A)^-1 fp32, v_new, the intra-chunk scores)): the last three are what
    the backward keeps."""
    G = chunk_cumsum(g, chunk)
    inverse = delta_wy.wy_inverse(k, G, beta, lay.dd, chunk=chunk, **run.kw)
    w, u = delta_wy.wy_apply(inverse, k, v, G, beta, lay.reads, chunk=chunk, **run.kw)
    factors = head_factors(G, lay, chunk)
    states, v_new, final = passes.forward(w, u, k, factors.write, factors.decay, h0, chunk, k.dtype, run)
    scores = la.intra_scores(q, k, G, lay.dd, chunk=chunk, gate="head", **run.kw)
    o = la.chunk_out(q, G, lay.reads, states, scores, v_new, chunk=chunk, gate="head", transpose_scores=False,
                     s_inter=scale, s_intra=scale, out_dtype=v.dtype, **run.kw)
    return o, final, (inverse, v_new, scores)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def delta_rule_vjp(q, k, v, g, beta, h0, lay, scale, chunk, passes, run):
    """(o, final state) of the gated delta rule on padded inputs."""
    o, final, _ = _forward(q, k, v, g, beta, h0, lay, scale, chunk, passes, run)
    return o, final


def vjp_forward(q, k, v, g, beta, h0, lay, scale, chunk, passes, run):
    """Keeps the chunks' T (fp32 [B, Tp, H, C]: half of k's bytes for bf16 k at C = 64, K = 256), from which
    the backward forms w (`delta_wy.wy_apply`) instead of solving again, v_new (v's bytes), from which it forms
    the states entering the chunks again in a plain state pass, and the intra-chunk scores (fp32 [B, H, Tp, C])."""
    o, final, extra = _forward(q, k, v, g, beta, h0, lay, scale, chunk, passes, run)
    return (o, final), (q, k, v, g, beta, h0, lay, *kept(extra))


def vjp_backward(scale, chunk, passes, run, res, cts):
    q, k, v, g, beta, h0, lay, inverse, v_new, scores = recompute_from(res)
    do, dfinal = cts
    do = do.astype(q.dtype)
    G, cumsum_vjp = jax.vjp(lambda g: chunk_cumsum(g, chunk), g)
    w, _ = delta_wy.wy_apply(inverse, k, None, G, beta, lay.reads, chunk=chunk, **run.kw)
    factors = head_factors(G, lay, chunk)
    states = passes.recompute(v_new, k, factors.write, factors.decay, h0, chunk, k.dtype, run)
    dv_local = la.chunk_out(k, None, None, None, scores, do, chunk=chunk, gate=None, transpose_scores=True,
                            s_inter=0.0, s_intra=scale, out_dtype=q.dtype, **run.kw)
    # w and dv_local come in k's and q's dtype
    dstates, dv_new, dh0 = passes.gradient(q, k, w, do, dv_local, *factors, dfinal, chunk, scale, q.dtype, run)
    dscores = la_grad.chunk_dscores(do, v_new, lay.dd, chunk=chunk, scale=scale, **run.kw)
    dq, dk, dw, dG = delta_rule.delta_dqkwg(q, k, v_new, do, dv_new, G, dscores, lay.reads, lay.writes, lay.keep,
                                            states, dstates, chunk=chunk, scale=scale, **run.kw)
    # w and u's share in one Pallas kernel, given the chunks' T (it adds dk's other share)
    dk, dv, dbeta, dG_wy = delta_wy.wy_gradient(k, v, G, beta, lay.reads, lay.dd, inverse, dw,
                                                dv_new.astype(k.dtype), dk, chunk=chunk, **run.kw)
    (dg,) = cumsum_vjp(dG + dG_wy)
    return dq, dk, dv.astype(v.dtype), dg.astype(g.dtype), dbeta.astype(beta.dtype), dh0, None


delta_rule_vjp.defvjp(vjp_forward, vjp_backward)


def padded_inputs(q, k, v, g, beta, initial_state, chunk_size, run):
    """(`Padded` inputs, padded g, padded beta) of the gated delta rule on the kernels."""
    inputs = backbone_inputs(q, k, v, initial_state, chunk_size, run.interpret, GPU_MAX_CHUNK)
    return inputs, pad(floored(g), inputs.length), pad(beta, inputs.length)


def with_passes(passes):
    """`gated_delta_rule` (the kernels' signature) with the state passes `passes`."""

    def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, interpret, config, chunk_size=64):
        run = Launch(interpret, config)
        if step.one_token(q):  # a decode step: one kernel (`pallas.step`)
            check_chunk(chunk_size, interpret, GPU_MAX_CHUNK)
            return step.gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=initial_state, docs=docs,
                                         run=run, recurrent=reference.recurrent)
        inputs, g, beta = padded_inputs(q, k, v, g, beta, initial_state, chunk_size, run)
        return inputs.undo(*delta_rule_vjp(*inputs.qkv, g, beta, inputs.h0, layout(docs, inputs.chunk), scale,
                                           inputs.chunk, passes, run))

    return gated_delta_rule


gated_delta_rule = with_passes(TRITON_PASSES)
