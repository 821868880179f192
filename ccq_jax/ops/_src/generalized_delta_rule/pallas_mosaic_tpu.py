"""The generalized delta rule on the Mosaic TPU state pass: its XLA chunk factors (`reference.chunk_factors`, the
per-channel decay inside the chunk; differentiated by autodiff) through the kernel under its custom VJP
(`pallas.state_pass`), the decay per key row of the state."""

import jax.numpy as jnp

from ..pallas import state_pass
from ..pallas.layout import check_chunk
from ..pallas.mosaic_tpu import refuse_tiling, supports
from .reference import chunk_factors

__all__ = ["generalized_delta_rule", "supports"]


def generalized_delta_rule(q, k, v, g, a, *, scale, initial_state, docs, interpret, config, chunk_size=64):
    """Chunked generalized delta rule with its state pass on Mosaic TPU; see `ccq_jax.ops.generalized_delta_rule`."""
    refuse_tiling(config)
    chunk = check_chunk(chunk_size, interpret)
    o, final = state_pass.delta_rule(chunk_factors(q, k, v, g, a, docs, chunk), initial_state, kernels=state_pass.TPU,
                                     scale=scale, dtype=jnp.result_type(q, k, v, a), length=q.shape[1],
                                     interpret=interpret)
    return o.astype(v.dtype), final
