"""Shared pieces of the conversion tests: the golden folders, tiny models with random parameters, a jitted forward."""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.models import abstract_model, get_config
from tests.models.conftest import forward  # noqa: F401  (jitted model call)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fla"
GOLDENS = sorted(p.name for p in FIXTURES.iterdir() if (p / "logits.npy").is_file())


def random_model(name, seed=0, **overrides):
    """A preset with random parameters, drawn in NumPy (no JAX work: building the model costs nothing)."""
    model = abstract_model(get_config(name, **overrides))
    rng = np.random.default_rng(seed)
    nnx.update(model, nnx.from_flat_state({
        path: jnp.asarray(0.3 * rng.standard_normal(var.get_value().shape), var.get_value().dtype)
        for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}))
    return model


def params(model):
    """Flat {path: NumPy array} of a model's parameters."""
    return {path: np.asarray(var[...]) for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def assert_same_params(a, b):
    """Bit-exact: the same paths, dtypes, shapes and values."""
    pa, pb = params(a), params(b)
    assert list(pa) == list(pb)
    for path in pa:
        np.testing.assert_array_equal(pa[path], pb[path], strict=True, err_msg=str(path))
