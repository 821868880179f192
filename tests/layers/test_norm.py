"""The gated RMSNorms' refusals by name, and the activation choice of `GatedRMSNorm` against its formula."""

import jax
import numpy as np
import pytest
from flax import nnx

from ccq_jax.layers.norm import GatedRMSNorm, GroupedGatedRMSNorm


@pytest.mark.parametrize("activation,act", [("swish", lambda g: g / (1 + np.exp(-g))),
                                            ("sigmoid", lambda g: 1 / (1 + np.exp(-g)))])
def test_gated_rms_norm_activation(activation, act):
    x, gate = (np.asarray(jax.random.normal(jax.random.key(i), (2, 3, 8)), np.float64) for i in (0, 1))
    norm = GatedRMSNorm(8, activation=activation, eps=1e-6)
    want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * act(gate)
    np.testing.assert_allclose(np.asarray(norm(x.astype(np.float32), gate.astype(np.float32))), want, rtol=1e-5,
                               atol=1e-6)


def test_gated_rms_norm_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match=r"activation: expected one of \['swish', 'sigmoid'\], got 'relu'"):
        GatedRMSNorm(8, activation="relu")


def test_grouped_gated_rms_norm_refuses_groups_that_do_not_divide():
    with pytest.raises(ValueError, match="group_size: must divide num_features = 8, got 3"):
        GroupedGatedRMSNorm(8, group_size=3)


def test_a_gated_rms_norm_holds_its_weight_alone():
    assert [p[-1] for p, _ in nnx.to_flat_state(nnx.state(GatedRMSNorm(8, activation="sigmoid"), nnx.Param))] == \
        ["weight"]
