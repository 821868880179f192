"""benchmarks/tools/hlo.py: launches by kind and their traffic, from optimized HLO text."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks.tools.hlo import entry_launches, shape_bytes
from benchmarks.train_throughput import planned_memory

# the shapes of an optimized GPU module's ENTRY lines (deviceless H200, gdn-1.3b's step), cut down; an
# instruction's attributes continue on an indented line here (joined before reading, as XLA writes them)
MODULE = """HloModule jit_step, entry_computation_layout={(f32[8,16]{1,0})->f32[8,16]{1,0}}

%fused_add (p: f32[8,16]) -> f32[8,16] {
  %p = f32[8,16]{1,0} parameter(0)
  ROOT %a = f32[8,16]{1,0} add(%p, %p)
}

ENTRY %main.1 (x.1: f32[8,16], w.2: bf16[16,32]) -> f32[8,16] {
  %x.1 = f32[8,16]{1,0} parameter(0), sharding={replicated}
  %w.2 = bf16[16,32]{1,0} parameter(1)
  %loop_add_fusion.3 = f32[8,16]{1,0} fusion(%x.1), kind=kLoop, calls=%fused_add, backend_config={"x":"y"}
  %bitcast.4 = bf16[8,16]{1,0} bitcast(%w.2)
  %gemm_fusion_dot.5 = bf16[8,32]{1,0} fusion(%bitcast.4, %w.2), kind=kCustom, calls=%g,
    backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{}}}
  %fusion.6 = bf16[8,32]{1,0} fusion(%gemm_fusion_dot.5), kind=kCustom, calls=%n,
    backend_config={"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"8"}}}
  %pallas_call.7 = (f32[8,16]{1,0}, f32[4]{0}) custom-call(%loop_add_fusion.3, /*index=1*/%fusion.6),
    custom_call_target="__gpu$xla.gpu.triton", operand_layout_constraints={f32[8,16]{1,0}, bf16[8,32]{1,0}}
  %get-tuple-element.8 = f32[8,16]{1,0} get-tuple-element(%pallas_call.7), index=0
  %cublas-gemm.9 = f32[8,8]{1,0} custom-call(%get-tuple-element.8, %get-tuple-element.8),
    custom_call_target="__cublas$gemm"
  %input_reduce_fusion.10 = f32[8]{0} fusion(%cublas-gemm.9), kind=kInput, calls=%r
  ROOT %tuple.11 = (f32[8,16]{1,0}) tuple(%get-tuple-element.8)
}
"""


def test_each_kind_and_its_traffic():
    got = entry_launches(MODULE.replace("\n    ", " "))
    f32_8x16, bf16_16x32, bf16_8x16, bf16_8x32 = 512, 1024, 256, 512
    assert got == {
        "kernel": {"launches": 1, "GiB": (f32_8x16 + 16 + f32_8x16 + bf16_8x32) / 2**30},  # a tuple output
        "gemm": {"launches": 2, "GiB": (bf16_8x32 + bf16_8x16 + bf16_16x32 + 256 + 2 * f32_8x16) / 2**30},
        "triton fusion": {"launches": 1, "GiB": 2 * bf16_8x32 / 2**30},
        "loop fusion": {"launches": 1, "GiB": 2 * f32_8x16 / 2**30},
        "input fusion": {"launches": 1, "GiB": (256 + 32) / 2**30},
    }
    assert list(got)[0] == "gemm"  # the most traffic first


def test_shapes_and_a_module_without_entry():
    assert shape_bytes("(bf16[4,4096]{1,0}, f32[], pred[3])") == 2 * 4 * 4096 + 4 + 3
    with pytest.raises(ValueError, match="hlo_text: expected an HLO module's text with an ENTRY computation"):
        entry_launches("%a = f32[] parameter(0)")


def test_a_compiled_program():
    """On this machine's backend: an elementwise program reads its input and writes its output (1 MiB each) and
    launches no GEMM."""
    step = jax.jit(lambda x: jnp.tanh(x) * 2.0 + 1.0)
    x = jnp.ones((512, 512), jnp.float32)
    got = entry_launches(step.lower(x).compile().as_text())
    assert "gemm" not in got and sum(v["launches"] for v in got.values()) >= 1
    assert sum(v["GiB"] for v in got.values()) == pytest.approx(2 * 2.0**-10)


def test_the_plan_carries_the_launches():
    step = jax.jit(lambda state, batch: (state @ state + batch.sum(), state.sum()))
    state, batch = jnp.ones((64, 64)), jnp.ones((16,))
    launches = planned_memory(step, state, batch)["launches"]
    assert sum(v["launches"] for v in launches.values()) >= 2 and all(v["GiB"] > 0 for v in launches.values())
