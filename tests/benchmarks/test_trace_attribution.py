"""benchmarks/probes/trace_attribution.py: GPU kernel time of a Perfetto trace grouped by the HLO op_name of each
kernel."""

import gzip
import json

import pytest

from benchmarks.probes.trace_attribution import attribute

HLO = """HloModule jit__lambda
  %fusion.3 = f32[8]{0} fusion(%p), kind=kLoop, metadata={op_name="jit(<lambda>)/while/body/eval_jaxpr/jvp()/mul"}
  %custom-call.7 = (bf16[8,8]{1,0}, s8[4]{0}) custom-call(%a, %b), custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(<lambda>)/while/body/eval_jaxpr/transpose(jvp())/dot_general" stack_frame_id=3}
  ROOT %pallas_call.2 = f32[8]{0} custom-call(%a), metadata={op_name="jit(<lambda>)/jvp(jit(gla))/chunk_dqk/pallas_call"}
"""


def _trace(tmp_path):
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "Stream #14(Compute)"}},
            {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "thread_name", "pid": 9, "tid": 1, "args": {"name": "python"}}]
    kernel = lambda name, op, us, pid=1, tid=2: {"ph": "X", "pid": pid, "tid": tid, "name": name, "dur": us,
                                                 "args": {"hlo_op": op}}
    events = meta + [kernel("loop_multiply_fusion", "fusion.3", 300.0), kernel("loop_multiply_fusion", "fusion.3", 100.0),
                     kernel("nvjet_sm90_tst_128x160", "custom-call.7", 1000.0), kernel("chunk_dqk", "pallas_call.2", 600.0),
                     kernel("unknown_kernel", "fusion.99", 50.0), kernel("host_op", "fusion.3", 5000.0, pid=9, tid=1)]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    (tmp_path / "hlo.txt").write_text(HLO)
    return str(path), str(tmp_path / "hlo.txt")


def test_kernels_are_summed_per_op_name_and_kind_per_step(tmp_path):
    result = attribute(*_trace(tmp_path), steps=2)
    groups = {(g["kind"], g["op_name"]): g for g in result["groups"]}
    assert groups[("fusion/other", "jvp()/mul")]["ms_per_step"] == pytest.approx(0.2)
    assert groups[("fusion/other", "jvp()/mul")]["kernels_per_step"] == 1
    assert groups[("gemm", "transpose(jvp())/dot_general")]["ms_per_step"] == pytest.approx(0.5)
    assert groups[("pallas", "jvp(jit(gla))/chunk_dqk/pallas_call")]["ms_per_step"] == pytest.approx(0.3)
    assert ("fusion/other", "(no op_name) unknown_kernel") in groups and result["events_without_op_name"] == 1
    # the host track's event is not a GPU kernel
    assert result["total_ms_per_step"] == pytest.approx((300 + 100 + 1000 + 600 + 50) / 2 / 1e3)
    assert result["by_kind_ms"] == pytest.approx({"gemm": 0.5, "pallas": 0.3, "fusion/other": 0.225})
