"""Every kernel, forward and backward, lowers to Triton IR for an H100/H200 (compute capability 9.0) without a GPU.

Interpret mode never exercises the Triton lowering's limits (power-of-two tiles, dot shapes,
supported primitives); cross-lowering for the "cuda" platform does, at the benchmark's head
dims. Compiling the Triton IR to machine code still needs a GPU (test_gpu.py).
"""

import jax
import jax.numpy as jnp
import pytest
from jax._src.pallas.triton import gpu_info, pallas_call_registration

import ccq_jax.ops as ops
import ccq_jax.ops.pallas as backend

B, T, H, K, V = 1, 128, 2, 256, 512


@pytest.fixture
def hopper(monkeypatch):
    """Lower as the Triton backend would on a compute-capability-9.0 GPU, with no GPU present."""
    info = gpu_info.GpuInfo(gpu_version=None, arch_name="9.0", compute_capability=90)
    monkeypatch.setattr(pallas_call_registration.gpu_info_lib, "get_gpu_info", lambda: info)
    monkeypatch.setattr(backend, "_interpret", lambda: False)


def _loss(name):
    def loss(q, k, v, g, g_head, beta, lam):
        if name == "gla":
            o, _ = ops.gla(q, k, v, g, impl="pallas")
        elif name == "gated_delta_rule":
            o, _ = ops.gated_delta_rule(q, k, v, g_head, beta, impl="pallas")
        else:
            o, _ = ops.ccq_query(q, k, lam, impl="pallas")
        return jnp.sum(jnp.square(o.astype(jnp.float32)))  # the backward pass needs o: forward kernels stay

    return loss


@pytest.mark.parametrize("name,kernels", [("gla", 10), ("gated_delta_rule", 10), ("ccq_query", 8)])
def test_lowers_to_triton(hopper, name, kernels):
    spec = lambda *shape, dtype=jnp.bfloat16: jax.ShapeDtypeStruct(shape, dtype)
    gates = [spec(B, T, H, K, dtype=jnp.float32)] + [spec(B, T, H, dtype=jnp.float32)] * 3
    args = [spec(B, T, H, K), spec(B, T, H, K), spec(B, T, H, V)] + gates
    grad = jax.jit(jax.value_and_grad(_loss(name), argnums=tuple(range(7))))
    text = grad.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == kernels
