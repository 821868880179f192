"""`ccq_query` feeding `gla` on the Triton kernels, under one custom VJP (`ccq_query.fused`)."""

from ..ccq_query.fused import Backbone, fused_op
from ..dispatch import triton_support
from ..gla.pallas_triton import padded_inputs
from ..pallas import step
from ..pallas.layout import Launch, check_chunk
from ..pallas.triton_linear import vjp_backward, vjp_forward
from . import reference

supports = triton_support


def ccq_gla(q, k, v, g, lam, *, scale, initial_state, initial_stats, centered, normalize_keys, docs, interpret,
            config, chunk_size=64):
    """See `ccq_jax.ops.ccq_gla`."""
    run = Launch(interpret, config)
    if step.one_token(q):  # a decode step: the read's and the backbone's step kernels
        check_chunk(chunk_size, interpret)
        return step.ccq_gla(q, k, v, g, lam, scale=scale, initial_state=initial_state, initial_stats=initial_stats,
                            centered=centered, normalize_keys=normalize_keys, docs=docs, run=run,
                            recurrent=reference.recurrent)
    inputs, g = padded_inputs(q, k, v, g, initial_state, chunk_size, run)
    backbone = Backbone.bind(vjp_forward, vjp_backward, scale, inputs.chunk, "channel", v.dtype, run)
    return fused_op(backbone, inputs, (inputs.qkv[2], g), lam, initial_stats, centered, normalize_keys, docs, run)
