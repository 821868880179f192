"""`ccq_query` feeding `gated_delta_rule` on the kernels, under one custom VJP (`ccq_query.fused`), for any of the
delta rule's `StatePasses`."""

from ..ccq_query.fused import Backbone, fused_op
from ..gated_delta_rule import pallas_triton as delta
from ..pallas import step
from ..pallas.layout import Launch, check_chunk
from . import reference


def with_passes(passes):
    """`ccq_gated_delta_rule` (the kernels' signature) with the delta rule's state passes `passes`."""

    def ccq_gated_delta_rule(q, k, v, g, beta, lam, *, scale, initial_state, initial_stats, centered,
                             normalize_keys, docs, interpret, config, chunk_size=64):
        run = Launch(interpret, config)
        if step.one_token(q):  # a decode step: the read's and the backbone's step kernels
            check_chunk(chunk_size, interpret, delta.GPU_MAX_CHUNK)
            return step.ccq_gated_delta_rule(q, k, v, g, beta, lam, scale=scale, initial_state=initial_state,
                                             initial_stats=initial_stats, centered=centered,
                                             normalize_keys=normalize_keys, docs=docs, run=run,
                                             recurrent=reference.recurrent)
        inputs, g, beta = delta.padded_inputs(q, k, v, g, beta, initial_state, chunk_size, run)
        backbone = Backbone.bind(delta.vjp_forward, delta.vjp_backward, scale, inputs.chunk, passes, run)
        return fused_op(backbone, inputs, (inputs.qkv[2], g, beta), lam, initial_stats, centered, normalize_keys,
                        docs, run)

    return ccq_gated_delta_rule
