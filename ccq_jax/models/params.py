"""Counting parameters without allocating them, and rebuilding a model under a changed config."""

import jax
import numpy as np
from flax import nnx

from ccq_jax.models.causal_lm import CausalLM
from ccq_jax.models.config import ModelConfig, apply_overrides


def abstract_model(config: ModelConfig) -> CausalLM:
    """The model with `jax.ShapeDtypeStruct` leaves (no memory, no compute)."""
    return nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0)))


def count_params(config: ModelConfig) -> int:
    """Number of parameters of `CausalLM(config)`, from shapes only."""
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract_model(config), nnx.Param)))


def with_config(model: CausalLM, **overrides) -> CausalLM:
    """A model sharing `model`'s parameters under a changed config (fields that keep the parameter tree).

    E.g. the paper's ablation `with_config(model, **{"ccq.mode": "off"})`, or
    `with_config(model, **{"kernel.impl": "recurrent"})`. Raises ValueError if the parameters differ.
    """
    config = apply_overrides(model.config, overrides)
    graphdef, abstract_state = nnx.split(abstract_model(config))
    state = nnx.state(model)
    shapes = lambda s: jax.tree.map(lambda x: (x.shape, x.dtype), s)
    if jax.tree.structure(abstract_state) != jax.tree.structure(state) or shapes(abstract_state) != shapes(state):
        raise ValueError(f"overrides: {sorted(overrides)} change the model's parameters; build a new model instead")
    return nnx.merge(graphdef, state)


def with_dtype(model: CausalLM, dtype: str) -> CausalLM:
    """A copy of `model` with parameters and compute in `dtype` (e.g. "float32" to compare a bf16 model with
    its own weights in full precision)."""
    config = apply_overrides(model.config, {"dtype": dtype, "param_dtype": dtype})
    graphdef, _ = nnx.split(abstract_model(config))
    cast = lambda x: x.astype(dtype) if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) else x
    return nnx.merge(graphdef, jax.tree.map(cast, nnx.state(model)))
