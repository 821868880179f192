"""The generalized delta rule on the Triton state pass: its XLA chunk factors (`reference.chunk_factors`, the
per-channel decay inside the chunk; differentiated by autodiff) through the kernel under its custom VJP
(`pallas.state_pass` with `pallas_kernels.delta_pass`), the decay per key row of the state. One token per row (a
decode step) runs the one-token kernel instead (`pallas.step`, the erase vector packed with the token)."""

import jax.numpy as jnp

from ..dispatch import triton_support
from ..pallas import state_pass, step
from ..pallas.layout import Launch, check_chunk
from .reference import chunk_factors, recurrent

__all__ = ["generalized_delta_rule", "supports"]

supports = triton_support


def generalized_delta_rule(q, k, v, g, a, *, scale, initial_state, docs, interpret, config, chunk_size=64):
    """Chunked generalized delta rule with its state pass on Triton; see `ccq_jax.ops.generalized_delta_rule`."""
    chunk = check_chunk(chunk_size, interpret)
    if step.one_token(q):
        return step.generalized_delta_rule(q, k, v, g, a, scale=scale, initial_state=initial_state, docs=docs,
                                           run=Launch(interpret, config), recurrent=recurrent)
    o, final = state_pass.delta_rule(chunk_factors(q, k, v, g, a, docs, chunk), initial_state,
                                     kernels=state_pass.triton(config), scale=scale,
                                     dtype=jnp.result_type(q, k, v, a), length=q.shape[1], interpret=interpret)
    return o.astype(v.dtype), final
