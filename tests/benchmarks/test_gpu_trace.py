"""benchmarks/gpu_trace.py: one traced call comes back as Perfetto events (and its file, when kept), and kernel
times sum by name and by kind."""

import gzip
import json

import jax.numpy as jnp
import pytest

from benchmarks.gpu_trace import by_kind, kernel_times, trace_call


def test_a_traced_call_returns_its_events_and_keeps_the_file(tmp_path):
    keep = tmp_path / "kept" / "trace.json.gz"
    events = trace_call(lambda: jnp.arange(8.0).sum(), keep=str(keep))
    assert events and all(isinstance(e, dict) for e in events)
    kept = json.loads(gzip.decompress(keep.read_bytes()))
    assert len(kept["traceEvents"] if isinstance(kept, dict) else kept) == len(events)


def test_kernel_times_sum_by_name_and_by_kind():
    kernels = [{"name": "nvjet_gemm", "dur": 3.0, "args": {"grid": 1}}, {"name": "nvjet_gemm", "dur": 2.0},
               {"name": "loop_add_fusion", "dur": 1.5}, {"name": "gla_fwd", "dur": 4.0}]
    totals, args = kernel_times(kernels)
    assert totals == {"nvjet_gemm": 5.0, "loop_add_fusion": 1.5, "gla_fwd": 4.0}
    assert args["nvjet_gemm"] == {"grid": 1}
    assert by_kind(totals) == pytest.approx({"matmul": 5.0, "pallas/other": 4.0, "fusion": 1.5})
    assert list(by_kind(totals)) == ["matmul", "pallas/other", "fusion"]  # largest first
