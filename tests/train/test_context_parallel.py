"""Training with sequences split over the mesh's `context` axis: the loss and every gradient equal one device's
(tests/train/context_parallel_step.py, 8 fake CPU devices in a process of its own), for the linear models (GLA,
Gated DeltaNet, KDA), the Transformer and hybrids; the linear-attention models' compiled steps all-gather nothing (only the shards' summaries
and the convolutions' halos move, by collective permutes), and those with softmax attention only the keys and
values of each attention layer and the segment ids; a prefill from a cache, and a forward without segment ids,
split the same way, equal one device's; a config whose context axis does not divide the sequence is refused by name."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import FP32_TOL
from tests.train.tiny_run import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def test_context_split_loss_gradients_and_prefill_equal_one_device():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "true",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "-m", "tests.train.context_parallel_step", "chunk"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = [line.split() for line in out.stdout.strip().splitlines()]
    assert len(rows) == 12 + 5 + 2, out.stdout  # six models on two meshes, five prefills, two forwards
    for name, _, _, error in rows[12:]:
        assert float(error) < 1e-5, (name, error)  # logits (and the new cache), fp32 round-off
    for name, _, mesh, _, loss, _, grads, _, gathers, _, floats, _, attention in rows[:12]:
        assert float(loss) < 1e-6 and float(grads) < FP32_TOL, (name, mesh, loss, grads)  # fp32 round-off
        if "tensor" not in mesh:  # keys and values of each attention layer, the segment ids once (if any layer)
            assert int(floats) == 2 * int(attention) and int(gathers) - int(floats) == min(int(attention), 1), (
                name, mesh, gathers, floats, attention)


def test_a_context_axis_that_does_not_divide_the_sequence_is_refused_by_name():
    with pytest.raises(ValueError, match=r"mesh.context: must divide data.seq_len=32 .* got 3"):
        tiny_config(mesh={"data": 1, "context": 3})
