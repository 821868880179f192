"""GLA on the Triton kernels: the chunked linear attention of `pallas.triton_linear` with per-channel gates (one
token: the step kernel, `pallas.step`)."""


from ..dispatch import triton_support
from ..pallas import step
from ..pallas.layout import Launch, backbone_inputs, check_chunk, floored, layout, pad
from ..pallas.triton_linear import linear_attention
from . import reference

supports = triton_support


def padded_inputs(q, k, v, g, initial_state, chunk_size, run):
    """(`Padded` inputs, padded g fp32, `floored`) of GLA on the kernels."""
    inputs = backbone_inputs(q, k, v, initial_state, chunk_size, run.interpret)
    return inputs, pad(floored(g), inputs.length, inputs.key_width)


def gla(q, k, v, g, *, scale, initial_state, docs, interpret, config, chunk_size=64):
    """Chunked GLA on the Triton kernels (one token: the step kernel, `pallas.step`); see `ccq_jax.ops.gla`."""
    run = Launch(interpret, config)
    if step.one_token(q):
        check_chunk(chunk_size, interpret)
        return step.gla(q, k, v, g, scale=scale, initial_state=initial_state, docs=docs, run=run,
                        recurrent=reference.recurrent)
    inputs, g = padded_inputs(q, k, v, g, initial_state, chunk_size, run)
    return inputs.undo(*linear_attention(*inputs.qkv, g, inputs.h0, layout(docs, inputs.chunk), scale, inputs.chunk,
                                         "channel", v.dtype, run))
