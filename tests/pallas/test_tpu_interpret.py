"""impl="pallas_mosaic_tpu" (every op) in TPU interpret mode on the CPU against the float64 recurrence.

The interpreter simulates a TPU's memory (HBM, VMEM, NaN-filled where nothing was written), two
cores taking the "parallel" grid points in random order, and a race detector that prints
"RACE DETECTED" for unordered accesses. Inputs as in test_interpret.py: T = 70 is not a multiple
of the chunk, K = 12 pads to 128 lanes (K = 130 to 256), each row packs several documents, one
row with strong decay, the other with zeroed gates. Lowering for a TPU (block rules) is checked
here too; compiling with the real Mosaic compiler is test_tpu_aot.py's.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from ccq_jax.ops.internals import TABLES, dispatch
from pallas_kernels.tiles import KernelConfig
from tests.builders import check_op, kernel_inputs as inputs


@pytest.mark.parametrize("chunk,dtype,dk", [(32, jnp.float32, 12), (16, jnp.bfloat16, 12), (64, jnp.float32, 130)])
def test_gla_against_recurrence(chunk, dtype, dk, capfd):
    check_op("gla", inputs(30, t=70, dk=dk), chunk, dtype, impl="pallas_mosaic_tpu")
    assert "RACE DETECTED" not in capfd.readouterr().out


@pytest.mark.parametrize("chunk,dtype,dk", [(32, jnp.float32, 12), (16, jnp.bfloat16, 12), (64, jnp.float32, 130)])
def test_gated_delta_rule_against_recurrence(chunk, dtype, dk, capfd):
    check_op("gated_delta_rule", inputs(30, t=70, dk=dk), chunk, dtype, impl="pallas_mosaic_tpu")
    assert "RACE DETECTED" not in capfd.readouterr().out


@pytest.mark.parametrize("chunk,dtype,dk", [(32, jnp.float32, 12), (16, jnp.bfloat16, 12), (64, jnp.float32, 130)])
def test_generalized_delta_rule_against_recurrence(chunk, dtype, dk, capfd):
    """The per-channel decay on the state pass's key rows (`pallas_kernels.delta_tpu`, decay [B, H, N, Kp, 1]); the
    erase vector a = b * k is not parallel to k."""
    check_op("generalized_delta_rule", inputs(30, t=70, dk=dk), chunk, dtype, impl="pallas_mosaic_tpu")
    assert "RACE DETECTED" not in capfd.readouterr().out


def test_generalized_delta_rule_infinite_log_gates(capfd):
    """g = -inf over a whole 16-token sub-block, -1e4 at other tokens and one -inf alone, later tokens in the same
    chunk: the factors' XLA form clamps them (no NaN), the kernel sees decays of exactly 0."""
    x = inputs(34, t=70)
    x["g"] = x["g"].copy()
    x["g"][0, 16:32] = -np.inf
    x["g"][0, 40:43] = -1e4
    x["g"][1, 50] = -np.inf
    check_op("generalized_delta_rule", x, 32, impl="pallas_mosaic_tpu")
    assert "RACE DETECTED" not in capfd.readouterr().out


@pytest.mark.parametrize("name,chunk,dtype", [("ccq_gla", 16, jnp.bfloat16), ("ccq_gated_delta_rule", 32, jnp.float32),
                                              ("ccq_generalized_delta_rule", 32, jnp.float32)])
def test_ccq_read_against_recurrence(name, chunk, dtype, capfd):
    """The CCQ read (its covariance on the GLA kernel) feeding each backbone: the read's own gradients are among the
    fused op's."""
    check_op(name, inputs(31, t=70), chunk, dtype, impl="pallas_mosaic_tpu")
    assert "RACE DETECTED" not in capfd.readouterr().out


def test_gla_lowers_for_a_tpu():
    """Forward and backward lower to Mosaic TPU custom calls at shapes that need padding (K = 130, V = 70)."""
    S = jax.ShapeDtypeStruct
    loss = lambda *x: jnp.sum(ops.gla(*x, impl="pallas_mosaic_tpu", chunk_size=64, interpret=False)[0])
    args = [S((2, 200, 2, 130), jnp.bfloat16)] * 2 + [S((2, 200, 2, 70), jnp.bfloat16), S((2, 200, 2, 130), jnp.float32)]
    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    assert text.count("tpu_custom_call") == 3  # forward, the backward's recomputed states, backward


def _call(platform, interpret=None):
    return dispatch.Call(platform=platform, interpret=interpret, dtype=jnp.float32, key_width=16, value_width=16,
                chunk_size=None)


def test_pallas_on_a_tpu_is_the_mosaic_tpu_kernel():
    for name, table in TABLES.items():
        assert dispatch.choose(name, table, "pallas", _call("tpu"))[0] == "pallas_mosaic_tpu"


def test_the_tpu_kernel_on_a_gpu_is_refused_unless_interpreted():
    with pytest.raises(ValueError, match=r"pallas_mosaic_tpu: the Mosaic TPU kernels compile for a TPU only"):
        dispatch.choose("gla", TABLES["gla"], "pallas_mosaic_tpu", _call("gpu"))
    assert dispatch.choose("gla", TABLES["gla"], "pallas_mosaic_tpu", _call("gpu", True))[0] == \
        "pallas_mosaic_tpu"


def test_pallas_on_a_gpu_is_a_gpu_kernel():
    """On a GPU impl="pallas" is the Mosaic GPU or Triton kernel of every op (the generalized delta rule's: its
    Triton state pass), never the TPU's."""
    for name, table in TABLES.items():
        assert dispatch.choose(name, table, "pallas", _call("gpu"))[0] in ("pallas_mosaic_gpu", "pallas_triton")


def test_a_triton_tiling_is_refused():
    x = inputs(30, t=20)
    with pytest.raises(ValueError, match=r"config: the Mosaic TPU kernels take no KernelConfig"):
        ops.gla(x["q"], x["k"], x["v"], x["g"], impl="pallas_mosaic_tpu", config=KernelConfig(width=32))
    with pytest.raises(ValueError, match=r"config: the Mosaic TPU kernels take no KernelConfig"):
        ops.gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"], impl="pallas_mosaic_tpu",
                             config=KernelConfig(width=32))
    with pytest.raises(ValueError, match=r"config: the Mosaic TPU kernels take no KernelConfig"):
        ops.generalized_delta_rule(x["q"], x["k"], x["v"], x["g"], x["a"], impl="pallas_mosaic_tpu",
                                   config=KernelConfig(width=32))
