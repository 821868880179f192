"""impl="pallas" in interpret mode (the kernels run as JAX ops on the CPU) against the float64 recurrence.

Tiny shapes: T = 70 is not a multiple of the chunk, K = 12 and V = 20 are not powers of two
(every padding path runs), chunk 32 has two secondary chunks (the off-diagonal blocks run),
and each row packs several documents, one row with strong decay, the other with zeroed
gates. Ops that share compiled pieces are checked in one test so that one process compiles
them once. The same checks at full size run on a GPU in test_gpu.py.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from pallas_kernels import delta_pass, delta_tpu
from tests.builders import check_op, kernel_inputs as inputs, KERNEL_OPS as OPS, rel_rms


@pytest.mark.parametrize("names,chunk,dtype", [
    (["gla", "ccq_query", "ccq_gla"], 32, jnp.float32),
    (["gated_delta_rule", "ccq_gated_delta_rule"], 32, jnp.float32),
    (["gla"], 16, jnp.bfloat16),
    (["gated_delta_rule"], 16, jnp.bfloat16),
    (["ccq_query", "ccq_gla", "ccq_gated_delta_rule"], 16, jnp.bfloat16),  # the half-precision paths of the CCQ read
    (["ccq_query"], 16, jnp.float32),  # chunks shorter than the CCQ read's 32-token programs
    (["generalized_delta_rule", "ccq_generalized_delta_rule"], 32, jnp.float32),
    (["generalized_delta_rule"], 16, jnp.bfloat16),
])
def test_against_recurrence(names, chunk, dtype):
    x = inputs(30, t=70)
    for name in names:
        check_op(name, x, chunk, dtype)


def test_generalized_delta_rule_over_several_value_slabs():
    """V = 130 pads to 256: the state pass's programs take four 64-wide V slabs, and the gradients that contract
    over V (of w, k_to_end, q_from_start, the scores and the decay) are each slab's share, summed."""
    check_op("generalized_delta_rule", inputs(35, t=40, h=1, dv=130), 16)


@pytest.mark.parametrize("name,centered,normalize_keys", [
    ("ccq_query", False, True), ("ccq_query", True, False),
    # the fused ops add the backbone's key gradient inside `key_grad`: there too without dm and without the norm
    ("ccq_gla", False, True), ("ccq_gated_delta_rule", True, False),
])
def test_ccq_options(name, centered, normalize_keys):
    """The CCQ read's kernels without the mean term and without normalised keys (each its own branch); chunk 64
    puts `key_grad`'s 32-token programs at both offsets inside a chunk."""
    check_op(name, inputs(31, t=70), 64, centered=centered, normalize_keys=normalize_keys)


def test_ccq_read_wide_keys():
    """K = 130 pads to 256: the covariance's kernels loop over 4 x 4 tiles of 64 of its states (K = 12 above pads to
    one tile)."""
    check_op("ccq_query", inputs(33, t=40, h=1, dk=130), 16)


def test_chunk_size_must_be_a_power_of_two():
    x = inputs(32, t=20)
    with pytest.raises(ValueError, match=r"chunk_size: impl='pallas' needs a power of two >= 16, got 24"):
        ops.gla(x["q"], x["k"], x["v"], x["g"], impl="pallas", chunk_size=24)


@pytest.mark.parametrize("name", ["gated_delta_rule", "ccq_gated_delta_rule"])
def test_gated_delta_rule_chunk_limit_on_a_gpu(name):
    """Compiled for a GPU (interpret=False on a CPU: lowered for one), the gated delta rule refuses chunks past 64
    before anything compiles (the H200 refused chunk 128 at compilation, for want of shared memory)."""
    x = inputs(32, t=20)
    with pytest.raises(ValueError, match=r"chunk_size: impl='pallas' runs the gated delta rule at chunk sizes up "
                                         r"to 64 on a GPU \(larger chunks need more shared memory than an "
                                         r"H100/H200 block has\), got 128"):
        getattr(ops, name)(*(x[n] for n in OPS[name]), impl="pallas", chunk_size=128, interpret=False)


@pytest.mark.parametrize("impl", ["chunk", "pallas"])
@pytest.mark.parametrize("names", [["gla", "ccq_gla"], ["gated_delta_rule"], ["generalized_delta_rule"]])
def test_infinite_and_huge_log_gates(impl, names):
    """g = -inf over a whole 16-token sub-block and -1e4 at other tokens, later tokens in the same chunk: the XLA
    chunked form once summed 0 * -inf across sub-blocks (NaN) and the kernels differenced -inf cumsums (NaN) or
    lost precision in cumsums of -1e4 (relative error 5e-3); the kernels now see gates `floored` at -100."""
    x = inputs(34, t=70)
    for key in ("g", "g_head"):
        x[key] = x[key].copy()
        x[key][0, 16:32] = -np.inf
        x[key][0, 40:43] = -1e4
        x[key][1, 50] = -np.inf
    for name in names:
        check_op(name, x, 32, impl=impl)


@pytest.mark.parametrize("rows", [1, 128], ids=["per-head", "per-key-row"])
def test_the_triton_state_pass_equals_its_mosaic_tpu_twin(rows):
    """`pallas_kernels.delta_pass` and `delta_tpu` take the same padded factors and return the same arrays: the
    forward's outputs, final and entering states, and the backward's every gradient, with the decay per head (the
    gated delta rule's layout, which no op sends to Triton) and per key row; two V slabs of 64."""
    rng = np.random.default_rng(36)
    b, h, n, c, kp, vp = 1, 2, 3, 16, 128, 128
    arr = lambda *shape, s=0.3: jnp.asarray(s * rng.standard_normal(shape), jnp.float32)
    factors = (arr(b, h, n, c, kp), arr(b, h, n, c, vp), arr(b, h, n, c, kp), arr(b, h, n, c, kp), arr(b, h, n, c, c),
               jnp.asarray(rng.uniform(0.5, 1, (b, h, n, rows, 1)), jnp.float32))
    h0, do, dfinal = arr(b, h, kp, vp), arr(b, h, n, c, vp), arr(b, h, kp, vp)
    kw = dict(scale=0.5, dtype=jnp.float32, interpret=True)
    tpu = delta_tpu.forward(*factors, h0, emit_states=True, **kw)
    triton = delta_pass.forward(*factors, h0, emit_states=True, **kw)
    for got, want in zip(triton, tpu):
        assert rel_rms(got, want) < 1e-6  # fp32 sums in another order
    grads = [kernels.backward(*factors, tpu[2], do, dfinal, **kw) for kernels in (delta_pass, delta_tpu)]
    for got, want in zip(*grads):
        assert got.shape == want.shape and rel_rms(got, want) < 1e-6
