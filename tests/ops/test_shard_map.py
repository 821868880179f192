"""Every op inside `jax.shard_map` with its default checks, and on a set mesh (4 CPU devices, batch and heads
sharded): the same outputs and gradients as unsharded, for the recurrent and chunk forms
(tests/ops/shard_map_check.py; tests/pallas/test_shard_map.py runs the kernels). An op splits the current mesh
over the axes it is told (`axes=OpsAxes(...)`), none without them, and refuses an axis the mesh lacks."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, AxisType

import ccq_jax.ops as ops
from tests.builders import shard_map_check

MESH = AbstractMesh((2, 2), ("data", "context"), axis_types=(AxisType.Auto,) * 2)  # a traced mesh of 4 devices


def _gla_jaxpr(axes, impl="pallas"):
    x = jnp.ones((2, 8, 2, 16), jnp.float32)
    with jax.sharding.use_abstract_mesh(MESH):
        return str(jax.make_jaxpr(lambda *a: ops.gla(*a, impl=impl, axes=axes)[0])(x, x, x, -x))


def test_ops_inside_shard_map_match_the_unsharded_ops():
    assert shard_map_check(["recurrent", "chunk"], cpu_devices=4) < 1e-5  # fp32 round-off: another summation order


def test_an_op_splits_the_current_mesh_over_the_axes_it_is_told_and_none_without():
    assert "shard_map" not in _gla_jaxpr(None) and "shard_map" not in _gla_jaxpr(ops.OpsAxes())
    assert "shard_map" in _gla_jaxpr(ops.OpsAxes(batch=("data",)))  # the kernel on each device's rows
    assert "shard_map" not in _gla_jaxpr(ops.OpsAxes(batch=("data",)), impl="chunk")  # XLA partitions the forms
    assert "shard_map" in _gla_jaxpr(ops.OpsAxes(context="context"), impl="chunk")  # the sequence split


def test_an_axis_the_current_mesh_lacks_is_refused_naming_axes():
    with pytest.raises(ValueError, match=r"axes: \['dat'\] are not axes of the current mesh, whose axes are "
                                         r"\['data', 'context'\]"):
        _gla_jaxpr(ops.OpsAxes(batch=("dat",)), impl="chunk")
    with pytest.raises(ValueError, match=r"axes: expected a ccq_jax.ops.OpsAxes or None, got \('data',\)"):
        _gla_jaxpr(("data",), impl="chunk")
    x = jnp.ones((2, 8, 2, 4), jnp.float32)
    assert ops.gla(x, x, x, -x, axes=ops.OpsAxes(batch=("dat",)))[0].shape == (2, 8, 2, 4)  # no mesh: unsplit
