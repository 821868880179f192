"""benchmarks/scaling.py: mesh names, the communication share and overlap from kernel events, and a whole run
on four fake CPU devices (one device, then a data and an fsdp mesh)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scaling import communication, parse_mesh
from train.sharding import MeshConfig


def test_meshes_are_named_or_spelled_out():
    assert parse_mesh("data") == MeshConfig(data=-1)
    assert parse_mesh("fsdp") == MeshConfig(data=1, fsdp=-1)
    assert parse_mesh("data:2xfsdp:4") == MeshConfig(data=2, fsdp=4)
    with pytest.raises(ValueError, match="--meshes: expected data, fsdp or AXIS:SIZE parts joined by x"):
        parse_mesh("dp:2")


def test_the_share_and_overlap_of_communication_per_gpu():
    kernel = lambda pid, name, ts, dur: {"pid": pid, "name": name, "ts": ts, "dur": dur}
    events = [kernel(1, "fusion_3", 0, 10), kernel(1, "ncclDevKernel_AllReduce", 5, 10),  # 5 of 10 overlapped
              kernel(1, "gemm", 20, 5),                                                    # busy 20 us in all
              kernel(2, "fusion_3", 0, 10), kernel(2, "ncclDevKernel_AllGather", 12, 4)]   # busy 14, none overlapped
    got = communication(events)
    assert got["gpus_traced"] == 2
    assert got["communication_share"] == pytest.approx((10 / 20 + 4 / 14) / 2)
    assert got["communication_overlapped"] == pytest.approx((0.5 + 0.0) / 2)


def test_a_whole_run_on_four_fake_devices():
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    out = subprocess.run([sys.executable, "benchmarks/scaling.py", "--presets", "gla-tiny", "--batch", "1",
                          "--seqlen", "32", "--steps", "1", "--warmup", "1", "--attn-impl", "chunk",
                          "--meshes", "data,fsdp"], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(r["devices"], r.get("mesh_name"), r["batch"]) for r in rows] == [(1, None, 1), (4, "data", 4),
                                                                               (4, "fsdp", 4)]
    assert rows[1]["mesh"] == {"data": 4} and rows[2]["mesh"] == {"fsdp": 4}
    assert rows[2]["efficiency"] == pytest.approx(rows[2]["tokens_per_s"] / (4 * rows[0]["tokens_per_s"]))
    assert rows[2]["arguments_GiB"] < rows[1]["arguments_GiB"]  # fsdp splits the parameters and optimizer state
    assert "| gla-tiny | fsdp | 4 |" in out.stdout
