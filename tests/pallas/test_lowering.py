"""Every kernel, forward and backward, lowers to Triton IR for an H100/H200 (compute capability 9.0) without a GPU.

Interpret mode never exercises the Triton lowering's limits (power-of-two tiles, dot shapes,
supported primitives); cross-lowering for the "cuda" platform does, at the benchmark's head
dims (`benchmarks.kernel_resources.lowered_kernels`, which test_resources.py also compiles).
Compiling the Triton IR to machine code for a real launch still needs a GPU (test_gpu.py).
"""

import pytest

from benchmarks.kernel_resources import lowered_kernels


@pytest.mark.parametrize("name,kernels", [("gla", 11), ("gated_delta_rule", 12), ("ccq_query", 11),
                                          ("ccq_gla", 22), ("ccq_gated_delta_rule", 23)])
def test_lowers_to_triton(name, kernels):
    assert len(lowered_kernels(name, "bfloat16")) == kernels
