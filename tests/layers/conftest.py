"""Helpers for the layer tests: random inputs and parameters that exercise every path."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


B, T, D = 2, 19, 32
# three documents in row 0 (the middle one a single token), one in row 1
SEGMENTS = np.array([[0] * 3 + [1] + [2] * 15, [5] * T], np.int32)


def inputs(seed=0, t=T):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((B, t, D)), jnp.float32)


def randomize(module, seed=1, scale=0.3):
    """Replace every parameter by random values (CCQ weights start at zero, norms at one: too special)."""
    rng = np.random.default_rng(seed)
    for _, var in nnx.iter_graph(module):
        if isinstance(var, nnx.Param):
            var.value = jnp.asarray(scale * rng.standard_normal(var.value.shape), var.value.dtype)
    return module


def params(module):
    return jax.tree.map(np.asarray, nnx.state(module, nnx.Param).to_pure_dict())


@nnx.jit
def call(layer, x, segment_ids=None, cache=None):
    """The layer's forward, compiled (one compile per shape is much cheaper than eager op-by-op dispatch)."""
    return layer(x, segment_ids=segment_ids, cache=cache)
