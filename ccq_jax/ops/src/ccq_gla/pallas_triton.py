"""`ccq_query` feeding `gla` on the Triton kernels, under one custom VJP (`ccq_query.fused`)."""

from ccq_jax.ops.pallas_layout import Launch
from ccq_jax.ops.registry import triton_support
from ccq_jax.ops.src.ccq_query.fused import Backbone, fused_op
from ccq_jax.ops.src.gla import pallas_triton as gla

supports = triton_support


def ccq_gla(q, k, v, g, lam, *, scale, initial_state, initial_stats, centered, normalize_keys, docs, interpret,
            config, chunk_size=64):
    """See `ccq_jax.ops.ccq_gla`."""
    run = Launch(interpret, config)
    inputs, g = gla.padded_inputs(q, k, v, g, initial_state, chunk_size, run)
    backbone = Backbone.bind(gla.vjp_forward, gla.vjp_backward, scale, inputs.chunk, "channel", v.dtype, run)
    return fused_op(backbone, inputs, (inputs.qkv[2], g), lam, initial_stats, centered, normalize_keys, docs, run)
