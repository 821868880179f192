"""impl="pallas" compiled for the GPU (Triton), at full size, against the float64 recurrence run on the same GPU.

Run on the GPU machine: `python3 -m pytest -m gpu tests/pallas`. Head dims are the
benchmark's (K = 256, V = 512); T = 1000 is not a multiple of the chunk (64); each row packs
several documents, one row with strong decay, the other with zeroed gates.
"""

import jax
import jax.numpy as jnp
import pytest

from tests.pallas.conftest import check_op, inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (Pallas compiles through Triton)"),
]


@pytest.fixture(scope="module")
def x():
    return inputs(40, t=1000, h=2, dk=256, dv=512)


@pytest.mark.parametrize("name", ["gla", "gated_delta_rule", "ccq_query", "ccq_gla", "ccq_gated_delta_rule"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
def test_against_recurrence(x, name, dtype):
    check_op(name, x, 64, dtype)


@pytest.mark.parametrize("name,centered,normalize_keys", [
    ("ccq_query", False, True), ("ccq_query", True, False), ("ccq_gla", False, True),
    ("ccq_gated_delta_rule", True, False),
])
def test_ccq_options(x, name, centered, normalize_keys):
    check_op(name, x, 64, jnp.bfloat16, centered=centered, normalize_keys=normalize_keys)
