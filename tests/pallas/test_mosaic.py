"""The Mosaic GPU state passes (`pallas_kernels.mosaic_delta_states`) without a GPU: the three lower to a Mosaic
GPU kernel each for the "cuda" platform (Mosaic GPU lowers in Python, so layouts, transforms, shared-memory
tiles, the warp-specialized pipeline and the hand-written one are checked here), calls that do not qualify are
refused by name, and impl="pallas" picks them only where they compile (the Triton twins otherwise). Their numbers
are checked on the GPU (test_gpu.py), where they run."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks.tools.lowering import lowered_kernels
import ccq_jax.ops as ops
from ccq_jax.ops.internals import TABLES, dispatch
from pallas_kernels import mosaic_delta_states as mosaic

B, T, H, K, V, C = 1, 128, 6, 256, 512, 64  # the benchmark's head shapes, two chunks


def _arguments(dtype=jnp.bfloat16, dk=K, dv=V):
    s = jax.ShapeDtypeStruct
    return (s((B, T, H, dk), dtype), s((B, T, H, dv), dtype), s((B, T, H, dk), dtype), s((B, T, H), jnp.float32),
            s((B, T // C, H), jnp.float32), s((B, H, dk, dv), jnp.float32))


@pytest.mark.parametrize("corrected", [True, False], ids=["delta_states", "chunk_states"])
def test_lowers_to_a_mosaic_gpu_kernel(corrected):
    def run(w, u, k, write, decay, h0):
        return mosaic.state_pass(w if corrected else None, u, k, write, decay, h0, chunk=C, store=jnp.bfloat16)

    lowered = jax.jit(run).trace(*_arguments()).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("stablehlo.custom_call @mosaic_gpu") == 1
    states, v_new, final = lowered.out_info
    assert states.shape == (B, T // C, H, K, V) and states.dtype == jnp.bfloat16
    assert (v_new.shape, v_new.dtype) == ((B, T, H, V), jnp.bfloat16) if corrected else v_new is None
    assert final.shape == (B, H, K, V) and final.dtype == jnp.float32


def _gradient_arguments(dtype=jnp.bfloat16, dk=K, dv=V):
    s, f32 = jax.ShapeDtypeStruct, jnp.float32
    return (s((B, T, H, dk), dtype), s((B, T, H, dk), dtype), s((B, T, H, dk), dtype), s((B, T, H, dv), dtype),
            s((B, T, H, dv), dtype), s((B, T, H), f32), s((B, T, H), f32), s((B, T // C, H), f32),
            s((B, H, dk, dv), f32))


def test_the_gradient_pass_lowers_to_a_mosaic_gpu_kernel():
    run = lambda *args: mosaic.state_gradient_pass(*args, chunk=C, scale=K ** -0.5, store=jnp.bfloat16)
    lowered = jax.jit(run).trace(*_gradient_arguments()).lower(lowering_platforms=("cuda",))
    assert lowered.as_text().count("stablehlo.custom_call @mosaic_gpu") == 1
    dstates, dv_new, dh0 = lowered.out_info
    assert (dstates.shape, dstates.dtype) == ((B, T // C, H, K, V), jnp.bfloat16)
    assert (dv_new.shape, dv_new.dtype) == ((B, T, H, V), jnp.bfloat16)
    assert (dh0.shape, dh0.dtype) == ((B, H, K, V), jnp.float32)


@pytest.mark.parametrize("dtype,dk,dv,chunk,store", [
    (jnp.float32, K, V, C, jnp.float32), (jnp.bfloat16, 64, V, C, jnp.bfloat16),
    (jnp.bfloat16, K, 64, C, jnp.bfloat16), (jnp.bfloat16, K, V, 32, jnp.bfloat16),
    (jnp.bfloat16, K, V, C, jnp.float32)])
def test_refuses_what_it_does_not_take(dtype, dk, dv, chunk, store):
    w, u, k, write, decay, h0 = (jnp.zeros(a.shape, a.dtype) for a in _arguments(dtype, dk, dv))
    assert not mosaic.supports(k, u, chunk, store)
    with pytest.raises(ValueError, match=f"K={dk}, V={dv}, chunk={chunk}"):
        mosaic.state_pass(w, u, k, write, decay, h0, chunk=chunk, store=store)
    gradient_args = (jnp.zeros(a.shape, a.dtype) for a in _gradient_arguments(dtype, dk, dv))
    with pytest.raises(ValueError, match=f"K={dk}, V={dv}, chunk={chunk}"):
        mosaic.state_gradient_pass(*gradient_args, chunk=chunk, scale=1.0, store=store)


def test_impl_pallas_triton_lowers_the_triton_twins():
    """Cross-lowered for a GPU (tests/pallas/test_lowering.py counts both backends' kernels under impl="pallas")."""
    triton, mosaic_kernels = lowered_kernels("gated_delta_rule", "bfloat16", impl="pallas_triton")
    assert mosaic_kernels == 0
    assert [name for name, *_ in triton].count("delta_states") == 1  # the forward's; the backward's is chunk_states
    assert len(triton) == 12


def test_the_state_pass_refuses_a_w_of_another_dtype():
    w, u, k, write, decay, h0 = (jnp.zeros(a.shape, a.dtype) for a in _arguments())
    with pytest.raises(ValueError, match="state pass takes bf16/fp16 inputs of one dtype"):
        mosaic.state_pass(w.astype(jnp.float32), u, k, write, decay, h0, chunk=C, store=jnp.bfloat16)


def test_the_gradient_pass_refuses_mixed_dtypes():
    args = [jnp.zeros(a.shape, a.dtype) for a in _gradient_arguments()]
    args[4] = args[4].astype(jnp.float32)  # dv_local
    with pytest.raises(ValueError, match="of one dtype"):
        mosaic.state_gradient_pass(*args, chunk=C, scale=1.0, store=jnp.bfloat16)


TABLE = TABLES["gated_delta_rule"]


def _call(platform="gpu", interpret=None, dtype=jnp.bfloat16, dk=K, dv=V, chunk=None):
    return dispatch.Call(platform, interpret, dtype, dk, dv, chunk)


@pytest.mark.parametrize("call,why", [
    (_call(interpret=True), "compile for a GPU only"),
    (_call(platform="cpu"), "compile for a GPU only"),
    (_call(dtype=jnp.float32), "got float32, K=256, V=512, chunk=64"),
    (_call(dk=64), "K=64"),
    (_call(chunk=32), "chunk=32"),
])
def test_the_backend_says_why_it_does_not_take_a_call(call, why):
    assert why in TABLE["pallas_mosaic_gpu"].supports(call)
    assert dispatch.choose("gated_delta_rule", TABLE, "pallas", call)[0] == "pallas_triton"


@pytest.mark.parametrize("call", [_call(), _call(platform="cpu", interpret=False), _call(dk=100, dv=300)])
def test_impl_pallas_picks_it_where_it_compiles(call):
    """On a GPU (or lowered for one from a CPU) at bf16, K and V padded to multiples of 128 (100 -> 128)."""
    assert TABLE["pallas_mosaic_gpu"].supports(call) is None
    assert dispatch.choose("gated_delta_rule", TABLE, "pallas", call)[0] == "pallas_mosaic_gpu"


def test_naming_it_where_it_does_not_compile_is_a_value_error():
    q = jnp.zeros((1, 16, 1, 16), jnp.float32)
    with pytest.raises(ValueError, match=r"impl: 'pallas_mosaic_gpu' does not take this call \(pallas_mosaic_gpu: "
                                         r"the Mosaic GPU kernels compile for a GPU only"):
        ops.gated_delta_rule(q, q, q, q[..., 0] * 0, q[..., 0], impl="pallas_mosaic_gpu")
