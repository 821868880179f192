"""Every op inside `jax.shard_map` with its default checks, and on a set mesh (4 CPU devices, batch and heads
sharded): the same outputs and gradients as unsharded, for the recurrent and chunk forms
(tests/ops/shard_map_check.py; tests/pallas/test_shard_map.py runs the kernels)."""

from tests.builders import shard_map_check


def test_ops_inside_shard_map_match_the_unsharded_ops():
    assert shard_map_check(["recurrent", "chunk"], cpu_devices=4) < 1e-5  # fp32 round-off: another summation order
