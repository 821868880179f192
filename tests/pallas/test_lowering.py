"""Every kernel, forward and backward, lowers for an H100/H200 (compute capability 9.0) without a GPU: to Triton IR,
and the gated delta rule's three bf16 state passes to Mosaic GPU (tests/pallas/test_mosaic.py checks those).

Interpret mode never exercises the Triton lowering's limits (power-of-two tiles, dot shapes,
supported primitives); cross-lowering for the "cuda" platform does, at the benchmark's head
dims (`benchmarks.tools.lowering.lowered_kernels`, whose kernels tests/benchmarks/test_kernel_resources.py also
compiles).
Compiling the Triton IR to machine code for a real launch still needs a GPU (test_gpu.py).
"""

import jax
import pytest

from benchmarks.tools.lowering import lowered_kernels

CASES = [("gla", 11, 0), ("gated_delta_rule", 9, 3), ("ccq_query", 11, 0), ("ccq_gla", 22, 0),
         ("ccq_gated_delta_rule", 20, 3),
         # the state pass: forward, the backward's states recomputed, backward (its chunk factors are XLA's)
         ("generalized_delta_rule", 3, 0), ("ccq_generalized_delta_rule", 14, 0)]
# (op, Triton kernels, Mosaic GPU kernels) of its forward and backward


@pytest.mark.parametrize("name,kernels,mosaic", CASES)
def test_lowers_to_triton_and_mosaic_gpu(name, kernels, mosaic):
    triton, n_mosaic = lowered_kernels(name, "bfloat16")
    assert (len(triton), n_mosaic) == (kernels, mosaic)


@pytest.mark.parametrize("name", [name for name, _, _ in CASES])
def test_lowers_with_x64_enabled(name):
    """With jax_enable_x64 a Python int in a kernel becomes int64: every kernel must still trace and lower."""
    with jax.enable_x64(True):
        triton, n_mosaic = lowered_kernels(name, "bfloat16")
    want = dict((n, (k, m)) for n, k, m in CASES)[name]
    assert (len(triton), n_mosaic) == want


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_the_lm_head_lowers_to_one_triton_kernel(x64):
    """The row-matmul kernel at two rows of gla-1.3b's head (`ccq_jax.ops.internals.head_logits`): its forward is
    one kernel."""
    with jax.enable_x64(x64):
        triton, n_mosaic = lowered_kernels("lm_head", "bfloat16", tokens=2)
    assert (len(triton), n_mosaic) == (1, 0) and triton[0][0] == "row_matmul"
