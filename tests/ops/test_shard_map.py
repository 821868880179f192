"""Every op inside `jax.shard_map` with its default checks (4 CPU devices, batch sharded): the same outputs and
gradients as unsharded, for the recurrent and chunk forms (tests/ops/shard_map_check.py, in its own process)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ops_inside_shard_map_match_the_unsharded_ops():
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_DISABLE_MOST_OPTIMIZATIONS": "true"}
    out = subprocess.run([sys.executable, "-m", "tests.ops.shard_map_check", "recurrent,chunk"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = out.stdout.strip().splitlines()
    assert len(rows) == 2 * 6 + 1, out.stdout
    worst = float(rows[-1].split()[-1])
    assert worst < 1e-5, out.stdout  # fp32 round-off: the shards sum in another order
