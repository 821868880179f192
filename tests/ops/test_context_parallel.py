"""Context parallelism (`ccq_jax.ops.sharding`): every op with its sequence split over 2, 3, 4 and 8 devices
(8 fake CPU devices in a process of its own, tests/ops/context_parallel_check.py) against the unsplit float64
recurrence, outputs, final states and statistics and every gradient, documents crossing and spanning shards; and
the messages of its errors."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AbstractMesh, AxisType

import ccq_jax.ops as ops
from ccq_jax.layers.conv import ShortConvolution, convolve
from tests.builders import FP32_TOL

ROOT = Path(__file__).resolve().parents[2]


def split_check(impls, devices, *options):
    """The worst relative RMS of tests/ops/context_parallel_check.py, after checking it printed every row."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "true",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "-m", "tests.ops.context_parallel_check", ",".join(impls),
                          ",".join(map(str, devices)), *options], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = out.stdout.strip().splitlines()
    runs = len(devices) + ("--on-mesh" in options)
    chosen = [o.split("=", 1)[1].split(",") for o in options if o.startswith("--ops=")]
    assert len(rows) == (len(chosen[0]) if chosen else 5) * len(impls) * runs + 1, out.stdout
    return float(rows[-1].split()[-1])


def test_the_chunk_form_split_over_2_3_8_devices_and_on_a_mesh_equals_the_float64_recurrence():
    # float64: the split is exact up to the summation order (measured ~1e-15); the mesh runs 4 context devices
    assert split_check(["chunk"], [2, 3, 8], "--on-mesh") < 1e-12


def test_the_read_policies_split_over_3_devices_equal_the_float64_recurrence():
    # the statistics a shard receives are the same for every policy; each policy reads them per token
    for read in ("cg:3", "neumann:2"):
        assert split_check(["chunk"], [3], "--ops=ccq_query,ccq_gla", f"--read={read}") < 1e-12


def test_the_generalized_delta_rule_split_over_2_and_3_devices_equals_the_float64_recurrence():
    # the [0 | I] widening gives its dense K x K shard transition, as for the gated delta rule; QED through it
    ops_ = "--ops=generalized_delta_rule,ccq_generalized_delta_rule,qed"
    assert split_check(["chunk"], [2, 3], ops_) < 1e-12


def test_the_recurrence_split_over_3_devices_equals_itself_unsplit():
    assert split_check(["recurrent"], [3]) < 1e-12


def test_kernels_split_over_3_devices_equal_the_float64_recurrence():
    # fp32 kernels (interpreted Triton) against the float64 recurrence: the kernels' own tolerance (measured 3e-7)
    assert split_check(["pallas"], [3]) < FP32_TOL


def test_the_generalized_delta_rule_kernels_split_over_3_devices_equal_the_float64_recurrence():
    # its Triton state pass (interpreted) inside each shard, the shard maps from the kernel run itself
    assert split_check(["pallas"], [3], "--ops=generalized_delta_rule,ccq_generalized_delta_rule") < FP32_TOL


def _gla_inputs(t):
    x = jnp.ones((2, t, 2, 4), jnp.float32)
    return x, x, x, -x


def test_a_length_the_mesh_context_axis_does_not_divide_is_refused_by_name():
    mesh = AbstractMesh((1, 2), ("data", "context"), axis_types=(AxisType.Auto,) * 2)
    with jax.sharding.use_abstract_mesh(mesh), pytest.raises(ValueError, match=r"q: T = 5 does not split evenly "
                                                                                r"over the mesh's 'context' axis of 2"):
        ops.gla(*_gla_inputs(5), axes=ops.OpsAxes(batch=("data",), context="context"))


def test_a_convolution_input_the_mesh_context_axis_does_not_divide_is_refused_by_name():
    conv = ShortConvolution(2, 4, std=0.1, rngs=nnx.Rngs(0), axes=ops.OpsAxes(context="context"))
    mesh = AbstractMesh((1, 2), ("data", "context"), axis_types=(AxisType.Auto,) * 2)
    with jax.sharding.use_abstract_mesh(mesh), pytest.raises(ValueError, match=r"x: T = 7 does not split evenly"):
        conv(jnp.ones((1, 7, 2)))


def test_an_initial_state_of_the_wrong_shape_is_refused_by_name_with_a_context_axis():
    split = lambda *a: ops.gla(*a, initial_state=jnp.zeros((2, 2, 4, 5)), context_axis="shards")
    with pytest.raises(ValueError, match=r"initial_state: expected shapes \[\(2, 2, 4, 4\)\], got \[\(2, 2, 4, 5\)\]"):
        jax.vmap(split, axis_name="shards")(*(jnp.stack([a, a]) for a in _gla_inputs(6)))


def test_a_shard_shorter_than_the_convolution_halo_is_refused_by_name():
    conv = lambda x: convolve(x, None, jnp.zeros((1, 3, 2)), jnp.ones((4, 2)), dtype=jnp.float32, recompute=False,
                              context_axis="shards")
    with pytest.raises(ValueError, match=r"x: each device's 2 tokens are fewer than the convolution's 3-token halo"):
        jax.vmap(conv, axis_name="shards")(jnp.ones((2, 1, 2, 2)))


def test_a_split_under_vmap_equals_the_unsplit_op_on_one_device():
    """`shifted` uses full permutations, so the algorithm also runs under `jax.vmap` with an axis name (one device
    simulating every shard): GLA with a document crossing the boundary, o and the final state."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 12, 2, 4)), jnp.float32) for _ in range(3))
    g = -jnp.asarray(rng.uniform(0, 1, (1, 12, 2, 4)), jnp.float32)
    segments = jnp.asarray([[0] * 3 + [1] * 7 + [2] * 2])
    want = ops.gla(q, k, v, g, segment_ids=segments, output_final_state=True)
    halves = lambda a: jnp.stack(jnp.split(a, 2, axis=1))
    o, final = jax.vmap(lambda *a: ops.gla(*a[:4], segment_ids=a[4], output_final_state=True, context_axis="s"),
                        axis_name="s")(*map(halves, (q, k, v, g, segments)))
    np.testing.assert_allclose(jnp.concatenate(list(o), axis=1), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final[-1], want[1], rtol=1e-5, atol=1e-6)
