"""benchmarks/probes/saved_residuals.py on tiny blocks: what a block keeps for its backward pass (tests/layers/
test_saved_residuals.py checks the functions one by one)."""

import pytest

from benchmarks.probes.saved_residuals import block_residuals


@pytest.mark.parametrize("preset", ["ccq-gdn-tiny", "ccq-gla-tiny"])
def test_a_block_keeps_no_float32_copy_from_those_functions(preset):
    """benchmarks/probes/saved_residuals.py over a whole block: nothing fp32 is kept from the norms, the convolution,
    the l2 normalisation, GLA's log gates, the CCQ gate or the MLP (the gates the ops take and their fp32 states are
    kept)."""
    rows = block_residuals(preset, batch=2, seqlen=16, attn_impl="chunk")
    assert rows and all(size > 0 for size, _, _ in rows)
    lean = ("norm.py", "conv.py", "mlp.py", "l2_normalized", "l2_inverse_norm", "log_sigmoid", "ccq.py")
    fp32 = [(what, where) for _, what, where in rows if what.startswith("float32[") and any(s in where for s in lean)]
    # the one exception: the l2 normalisation's inverse norm, one number a row ([..., 1])
    assert [what for what, where in fp32 if not ("l2_inverse_norm" in where and what.endswith(",1]"))] == []
    assert any("l2_inverse_norm" in where for _, where in fp32) == preset.startswith("ccq-gdn")
