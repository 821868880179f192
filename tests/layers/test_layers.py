"""Each mixer against its float64 NumPy forward (fla's layer definitions), with and without CCQ and documents."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.layers import Attention, CCQConfig, GatedDeltaNet, GatedLinearAttention, KernelPolicy
from tests.layers import numpy_layers as ref
from tests.builders import call, D, layer_inputs as inputs, layer_params as params, randomize, rel_rms, SEGMENTS

TOL = 2e-5  # fp32 layer vs float64 NumPy (measured ~1e-6)
CCQ = {"none": None, "learned": CCQConfig(), "fixed": CCQConfig(mode="fixed", fixed_lambda=0.7, centered=False),
       "off": CCQConfig(mode="off")}


# (CCQ mode, short convs, kv heads, clamp_min, output gate, documents): every option at least once
GLA_CASES = [("none", False, None, -0.05, True, True), ("learned", True, None, None, True, True),
             ("fixed", False, 2, None, False, False), ("off", True, None, None, True, True)]


@pytest.mark.parametrize("ccq,conv,kv_heads,clamp,gate,segments", GLA_CASES)
def test_gla_layer_matches_numpy(ccq, conv, kv_heads, clamp, gate, segments):
    layer = randomize(GatedLinearAttention(D, num_heads=4, num_kv_heads=kv_heads, use_short_conv=conv,
                                           clamp_min=clamp, use_output_gate=gate, ccq=CCQ[ccq],
                                           kernel=KernelPolicy(impl="recurrent"), rngs=nnx.Rngs(0)))
    seg = SEGMENTS if segments else None
    y, cache = call(layer, inputs(), seg)
    expected = ref.gla(params(layer), inputs(), num_heads=4, num_kv_heads=kv_heads or 4, conv=conv, ccq=CCQ[ccq],
                       eps=1e-5, clamp_min=clamp, segment_ids=seg)
    assert cache is None
    assert rel_rms(y, expected) < TOL


# (CCQ mode, value heads (GVA), allow_neg_eigval, short convs and output gate, documents)
GDN_CASES = [("none", None, False, False, False), ("learned", None, False, True, True), ("fixed", 4, True, True, True)]


@pytest.mark.parametrize("ccq,v_heads,neg,conv_and_gate,segments", GDN_CASES)
def test_gated_deltanet_layer_matches_numpy(ccq, v_heads, neg, conv_and_gate, segments):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = GatedDeltaNet(D, num_heads=2, head_dim=8, num_v_heads=v_heads, allow_neg_eigval=neg,
                              use_short_conv=conv_and_gate, use_gate=conv_and_gate, ccq=CCQ[ccq],
                              kernel=KernelPolicy(impl="recurrent"), rngs=nnx.Rngs(0))
    assert any("crucial" in str(w.message) for w in caught) != conv_and_gate  # fla's warning without convs
    randomize(layer)
    seg = SEGMENTS if segments else None
    y, _ = call(layer, inputs(), seg)
    expected = ref.gated_deltanet(params(layer), inputs(), num_heads=2, head_dim=8, ccq=CCQ[ccq], eps=1e-5,
                                  allow_neg_eigval=neg, segment_ids=seg)
    assert rel_rms(y, expected) < TOL


@pytest.mark.parametrize("kv_heads,segments", [(None, True), (2, False)])
def test_attention_layer_matches_numpy(kv_heads, segments):
    layer = randomize(Attention(D, num_heads=4, num_kv_heads=kv_heads, rope_theta=500.0, rngs=nnx.Rngs(0)))
    seg = SEGMENTS if segments else None
    y, _ = call(layer, inputs(), seg)
    expected = ref.attention(params(layer), inputs(), num_heads=4, num_kv_heads=kv_heads or 4, theta=500.0,
                             segment_ids=seg)
    assert rel_rms(y, expected) < TOL


# the chunked form for the pieces longer than one token, the recurrent form for the single token
# (Gated DeltaNet shares this cache code with GLA; its chunked form with a state is tested in tests/ops)
MIXERS = {
    "gla": lambda: GatedLinearAttention(D, num_heads=4, use_short_conv=True, ccq=CCQConfig(),
                                        kernel=KernelPolicy(chunk_size=8), rngs=nnx.Rngs(0)),
    "attention": lambda: Attention(D, num_heads=4, rngs=nnx.Rngs(0)),
}


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_calls_continued_through_the_cache_equal_one_call(mixer):
    """Pieces of 9, 1 and 9 tokens through the cache (documents start inside the first piece) = one pass.

    A call with a cache continues the cached document at its position 0, so no piece starts a document.
    """
    layer = randomize(MIXERS[mixer]())
    x = inputs(3)
    full, _ = call(layer, x, SEGMENTS)
    cache = layer.init_cache(x.shape[0], x.shape[1])
    outs, start = [], 0
    for size in (9, 1, 9):
        seg = SEGMENTS[:, start:start + size]
        y, cache = call(layer, x[:, start:start + size], seg, cache)
        outs.append(y)
        start += size
    assert rel_rms(jnp.concatenate(outs, axis=1), full) < 1e-5


def test_ccq_off_keeps_no_statistics_and_equals_the_backbone():
    ccq = randomize(GatedLinearAttention(D, num_heads=4, ccq=CCQConfig(mode="off"), rngs=nnx.Rngs(0)))
    plain = GatedLinearAttention(D, num_heads=4, rngs=nnx.Rngs(0))
    nnx.update(plain, {k: v for k, v in nnx.state(ccq, nnx.Param).to_pure_dict().items() if k != "ccq"})
    assert ccq.init_cache(2).stats is None
    np.testing.assert_array_equal(call(ccq, inputs())[0], call(plain, inputs())[0])
