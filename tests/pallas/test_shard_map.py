"""The kernels (interpreted, 4 CPU devices) inside `jax.shard_map` and on a set mesh, where each op wraps its kernel
call in a shard_map of its own (`ccq_jax.ops.sharding.local`): the same outputs and gradients as unsharded
(tests/ops/shard_map_check.py; tests/pallas/test_gpu.py runs it compiled on a GPU)."""

from tests.builders import shard_map_check


def test_kernels_inside_shard_map_and_on_a_mesh_match_the_unsharded_ops():
    assert shard_map_check(["pallas"], cpu_devices=4) < 1e-5
