"""benchmarks/inference_kernels.py: the kernels an entry computation launches and the bytes they touch, read from
compiled HLO (a CPU prefill and decode step, a hand-written module, an H200's compile of a vector-matrix product)."""

from pathlib import Path

import pytest
from flax import nnx

from benchmarks.inference_kernels import decode_step_kernels, entry_kernels, measure, prefill_kernels
from benchmarks.inference_kernels import shape_bytes, table
from benchmarks.tools.targets import target_device
from ccq_jax.inference import SplitModel
from ccq_jax.models import abstract_model, count_params, get_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"

HLO = """HloModule jit_step

%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p)
}

ENTRY %main (a: f32[4], b: f32[4,4]) -> (f32[4], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %b = f32[4,4]{1,0} parameter(1)
  %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_computation
  %d = f32[4]{0} dot(%f, %b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %m = (f32[4]{0}, bf16[4,4]{1,0}) fusion(%d, %b), kind=kLoop, calls=%fused_computation
  %g = f32[4]{0} get-tuple-element(%m), index=0
  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%g, %d)
}
"""


def test_shapes_are_sized_in_bytes():
    assert shape_bytes("bf16[2,1024]{1,0}") == 4096
    assert shape_bytes("(f32[4]{0}, s32[], pred[3])") == 16 + 4 + 3


def test_the_entry_launches_fusions_and_dots_with_their_operands_and_results():
    """Not the fused computation's exponential, parameters, tuples or tuple reads; a fusion with a tuple result
    (two outputs) counts once, with both outputs."""
    assert entry_kernels(HLO) == [("fusion", 16 + 16), ("dot", 16 + 16 + 64), ("fusion", 16 + 32 + 16 + 64)]


def test_one_row_through_a_gpu_reads_the_weight_three_times_and_two_rows_once():
    """XLA's GPU compiler writes x * W whole at one row, then reduces it; two rows are one GEMM (H200 compiles)."""
    weight = 2048 * 2048 * 2
    one = entry_kernels((FIXTURES / "vector_matrix_1row.hlo").read_text())
    two = entry_kernels((FIXTURES / "vector_matrix_2row.hlo").read_text())
    assert [op for op, _ in one] == [op for op, _ in two] == ["fusion", "fusion"]
    assert sum(b for _, b in one) > 3 * weight
    assert sum(b for _, b in two) < 1.1 * weight


def test_a_decode_step_and_a_prefill_touch_at_least_their_weights():
    config = get_config("gla-tiny")
    served = SplitModel(*nnx.split(abstract_model(config)))
    step = decode_step_kernels(served, rows=1)
    assert step["kernels"] == sum(step["by_op"].values()) > 0
    assert step["bytes"] >= count_params(config) * 4
    assert decode_step_kernels(served, rows=2)["kernels"] > 0
    short, long = prefill_kernels(served, 1, 16), prefill_kernels(served, 1, 64)
    assert long["bytes"] > short["bytes"] >= count_params(config) * 4


def test_local_records_hold_the_prefills_and_the_rows_the_backend_runs():
    rows = measure("gla-tiny", "float32", [(2, 16)], [1, 3], "local", "chunk", hbm_tb_s=1.0,
                   decode_impls=("recurrent", "pallas"))
    assert [(r["what"], r["batch"], r.get("prompt"), r.get("rows"), r.get("decode_impl")) for r in rows] == [
        ("prefill", 2, 16, None, None), ("decode step", 1, None, 1, "recurrent"), ("decode step", 1, None, 1, "pallas"),
        ("decode step", 3, None, 3, "recurrent"), ("decode step", 3, None, 3, "pallas")]  # a CPU: one row as one
    assert all(r["bytes_ms"] == pytest.approx(r["bytes"] / 1e9) and r["attn_impl"] == "chunk" for r in rows)
    assert "| gla-tiny | prefill | 2 | 16 |" in table(rows) and "| gla-tiny | decode step | 3 | 3 |" in table(rows)
    assert "| gla-tiny | decode step, pallas step | 3 | 3 |" in table(rows)


def test_each_further_head_impl_is_counted_with_the_first_decode_impl():
    rows = measure("gla-tiny", "float32", [], [2], "local", "chunk", hbm_tb_s=1.0,
                   decode_impls=("recurrent", "pallas"), head_impls=("xla", "pallas"))
    assert [(r["decode_impl"], r["head_impl"]) for r in rows] == [
        ("recurrent", "xla"), ("pallas", "xla"), ("recurrent", "pallas")]
    assert "| gla-tiny | decode step, pallas head | 2 | 2 |" in table(rows)
    transformer = measure("transformer-tiny", "float32", [], [1], "local", "chunk", hbm_tb_s=1.0,
                          head_impls=("xla", "pallas"))
    assert [(r["decode_impl"], r["head_impl"]) for r in transformer] == [(None, "xla"), (None, "pallas")]


def test_targets_are_named_and_an_h200_needs_the_cuda_plugin():
    assert target_device("local") is None
    with pytest.raises(ValueError, match=r"target: expected 'local' or one of \['h200'\], got 'h100'"):
        target_device("h100")
    try:
        device = target_device("h200")
    except ValueError as error:  # the gpu extra is not installed here (CI)
        assert "needs JAX's CUDA plugin (pip install -e '.[gpu]')" in str(error)
    else:
        assert device.platform == "gpu" and device.device_kind == "NVIDIA H200"
