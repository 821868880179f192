"""Every Pallas kernel (forward and backward, bf16, the benchmark's head sizes) fits an H100/H200 block's shared
memory, checked without a GPU: the kernels' Triton IR compiled for sm_90 by the `triton` package
(benchmarks/kernel_resources.py). A necessary check, not a sufficient one: it gave the very byte count the H200
reported for one refused kernel, and 205,824 bytes for another that asked the H200 for 246,788.
"""

import pytest

from benchmarks.kernel_resources import SHARED_LIMIT, measure


@pytest.mark.parametrize("op", ["gla", "gated_delta_rule", "ccq_query"])
def test_every_kernel_fits_the_shared_memory(op):
    rows = measure(op, "bfloat16", timeout=300)
    assert rows, "no kernel lowered"
    failed = [name for name, _, _, found in rows if found is None or found[0] is None]
    assert not failed, f"did not compile: {failed}"
    over = {name: found[0] for name, _, _, found in rows if found[0] > SHARED_LIMIT}
    assert not over, f"over the {SHARED_LIMIT} bytes of shared memory per block: {over}"


def test_the_lm_head_kernel_fits_without_spills():
    """The row-matmul kernel at two rows of gla-1.3b's head: measured 108 KB of shared memory, 80 registers."""
    [(name, _, _, (shared, _, stores, loads))] = measure("lm_head", "bfloat16", timeout=300, tokens=2)
    assert name == "row_matmul" and shared <= SHARED_LIMIT and stores == loads == 0


@pytest.mark.parametrize("heads", [(16, 128, 128), (2, 256, 512)], ids=["kda-1.3b", "k256-v512"])
def test_the_generalized_state_pass_fits_without_spills(heads):
    """`pallas_kernels.delta_pass` (the generalized delta rule's Triton state pass, forward and backward) at fla's
    KDA-1.3B heads and at the GLA / GDN benchmark's: measured 255 / 129 and 159 / 179 registers, no spills."""
    rows = measure("generalized_delta_rule", "bfloat16", timeout=300, heads=heads)
    # the forward twice: with and without the entering states (the backward's recompute)
    assert {name for name, *_ in rows} == {"delta_pass_backward", "delta_pass_forward"}
    for name, _, _, found in rows:
        shared, _, stores, loads = found
        assert shared <= SHARED_LIMIT and stores == loads == 0, (name, found)
