"""One token per row (T = 1, a decode step) on impl="pallas": the one-token kernels (`pallas_kernels.recurrent_step`,
interpreted here) against the float64 recurrence, gradients included (`ccq_jax/ops/_src/pallas/step.py`: the
recurrence's own backward), and what they lower to for an H200.

K = 12 and V = 20 pad to one 16-wide tile; K = 64 and V = 96 (padded to 128) span two row tiles of the covariance and
four column tiles of the state. The initial state and statistics are random (five keys' worth), so the step adds
to something.
"""

import re

import jax
import jax.numpy as jnp
import pytest

import ccq_jax.ops as ops
from benchmarks.tools.lowering import lowered_kernels
from tests.builders import check_op, kernel_inputs, op_arguments

STEP_KERNELS = {"gla": ["state_step"], "gated_delta_rule": ["state_step"], "ccq_query": ["ccq_read_step"],
                "ccq_gla": ["ccq_read_step", "state_step"], "ccq_gated_delta_rule": ["ccq_read_step", "state_step"],
                # the erase vector a packed with the token
                "generalized_delta_rule": ["state_step"],
                "ccq_generalized_delta_rule": ["ccq_read_step", "state_step"]}
OPS = list(STEP_KERNELS)


@pytest.mark.parametrize("dk,dv", [(12, 20), (64, 96)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_one_token_against_recurrence(dk, dv, dtype):
    x = kernel_inputs(40, t=1, dk=dk, dv=dv, segments=False)
    for name in OPS:
        check_op(name, x, 16, dtype)


@pytest.mark.parametrize("name,centered,normalize_keys", [("ccq_gla", False, True), ("ccq_gated_delta_rule", True,
                                                                                     False)])
def test_one_token_ccq_options(name, centered, normalize_keys):
    """The read's step without the mean term and without normalised keys (each a branch of its kernel)."""
    check_op(name, kernel_inputs(41, t=1, dk=64, dv=20, segments=False), 16, centered=centered,
             normalize_keys=normalize_keys)


@pytest.mark.parametrize("name", OPS)
def test_one_token_runs_only_the_step_kernels(name):
    """The forward at T = 1 is the step kernels alone (no chunked pass pads the token to a chunk); longer calls keep
    the chunked kernels."""
    def kernels(t):
        pos, kw = op_arguments(name, kernel_inputs(42, t=t, segments=False), jnp.float32)
        jaxpr = jax.make_jaxpr(lambda *p: getattr(ops, name)(*p, **kw, impl="pallas"))(*pos)
        return re.findall(r"pallas_call\[.*?name=(\w+)", str(jaxpr), re.S)

    assert kernels(1) == STEP_KERNELS[name]
    assert not set(kernels(2)) & {"state_step", "ccq_read_step"}


@pytest.mark.parametrize("name", OPS)
def test_one_token_lowers_for_the_h200(name):
    """Lowered to Triton for compute capability 9.0 at the 1.3B presets' K = 256, V = 512, forward and backward: the
    step kernels only (the backward is XLA's, the recurrence's)."""
    triton, mosaic = lowered_kernels(name, "bfloat16", tokens=1)
    assert [n for n, *_ in triton] == STEP_KERNELS[name] and mosaic == 0
