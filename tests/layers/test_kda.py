"""KimiDeltaAttention (KDA) and GatedDeltaNet2 (GDN-2) against float64 NumPy forwards of fla's layers (gates,
GVA, short convs, CCQ, documents) and GDN-2 against fla's own layer (goldens), continued through the cache, and
their refusals by name; each also through the kernels (the Triton state pass, interpreted on a CPU) against the same NumPy forward.
(KDA against fla's own model: tests/convert/test_goldens.py.)"""

import jax.numpy as jnp
import pytest
from flax import nnx

from ccq_jax.layers import CCQConfig, GatedDeltaNet2, KernelPolicy, KimiDeltaAttention
from tests.builders import (
    call, D, layer_golden, LAYER_GOLDENS, layer_inputs as inputs, layer_params as params, randomize, rel_rms, SEGMENTS,
)
from tests.layers import numpy_delta_layers as ref

TOL = 2e-5  # fp32 layer vs float64 NumPy, as for the other mixers
CCQ = {"none": None, "learned": CCQConfig(), "fixed": CCQConfig(mode="fixed", fixed_lambda=0.7, centered=False)}
RECURRENT, CHUNK = KernelPolicy(impl="recurrent"), KernelPolicy(chunk_size=4)
PALLAS = KernelPolicy(impl="pallas", decode_impl="pallas", chunk_size=16)  # Triton's state pass, interpreted here

# (CCQ mode, value heads (GVA), allow_neg_eigval, short convs, lower_bound (safe_gate), documents, kernel)
KDA_CASES = [("none", None, False, True, None, True, RECURRENT), ("learned", 4, True, True, -5.0, True, CHUNK),
             ("fixed", 4, False, False, None, False, RECURRENT), ("learned", 4, False, True, None, True, PALLAS)]


@pytest.mark.parametrize("ccq,v_heads,neg,conv,lower_bound,segments,kernel", KDA_CASES)
def test_kda_layer_matches_numpy(ccq, v_heads, neg, conv, lower_bound, segments, kernel):
    layer = randomize(KimiDeltaAttention(D, num_heads=2, head_dim=8, num_v_heads=v_heads, allow_neg_eigval=neg,
                                         use_short_conv=conv, safe_gate=lower_bound is not None,
                                         lower_bound=lower_bound, ccq=CCQ[ccq], kernel=kernel, rngs=nnx.Rngs(0)))
    seg = SEGMENTS if segments else None
    y, _ = call(layer, inputs(), seg)
    expected = ref.kda(params(layer), inputs(), num_heads=2, head_dim=8, ccq=CCQ[ccq], eps=1e-5,
                       allow_neg_eigval=neg, lower_bound=lower_bound, segment_ids=seg)
    assert rel_rms(y, expected) < TOL


# (CCQ mode, value heads (GVA), allow_neg_eigval, short convs, documents, kernel)
GDN2_CASES = [("none", None, False, True, True, RECURRENT), ("learned", 4, True, True, True, CHUNK),
              ("fixed", 4, False, False, False, RECURRENT), ("none", 4, True, True, True, PALLAS)]


@pytest.mark.parametrize("ccq,v_heads,neg,conv,segments,kernel", GDN2_CASES)
def test_gdn2_layer_matches_numpy(ccq, v_heads, neg, conv, segments, kernel):
    layer = randomize(GatedDeltaNet2(D, num_heads=2, head_dim=8, num_v_heads=v_heads, allow_neg_eigval=neg,
                                     use_short_conv=conv, ccq=CCQ[ccq], kernel=kernel, rngs=nnx.Rngs(0)))
    seg = SEGMENTS if segments else None
    y, _ = call(layer, inputs(), seg)
    expected = ref.gdn2(params(layer), inputs(), num_heads=2, head_dim=8, ccq=CCQ[ccq], eps=1e-5,
                        allow_neg_eigval=neg, segment_ids=seg)
    assert rel_rms(y, expected) < TOL


def test_the_gdn2_layer_goldens_are_there():
    assert {"gdn2-layer", "gdn2-layer-noconv"} <= set(LAYER_GOLDENS)


@pytest.mark.parametrize("kernel", [RECURRENT, CHUNK], ids=["recurrent", "chunk"])
@pytest.mark.parametrize("case", LAYER_GOLDENS)
def test_layer_matches_fla_own_layer(case, kernel):
    """fla's `GatedDeltaNet2` (its `naive_recurrent_gdn2` on the CPU paths, scripts/make_fla_goldens.py): its
    state_dict loaded by fla's names and layouts, the same x."""
    layer, x, expected = layer_golden(case, kernel=kernel)
    y, _ = call(layer, jnp.asarray(x))
    assert rel_rms(y, expected) < TOL


MIXERS = {"kda": KimiDeltaAttention, "gdn2": GatedDeltaNet2}


@pytest.mark.parametrize("mixer,kernel", [("kda", CHUNK), ("gdn2", CHUNK), ("kda", PALLAS)],
                         ids=["kda-chunk", "gdn2-chunk", "kda-pallas"])
def test_calls_continued_through_the_cache_equal_one_call(mixer, kernel):
    """Pieces of 9, 1 and 9 tokens through the cache (chunked, then the one-token step, then chunked) = one pass."""
    layer = randomize(MIXERS[mixer](D, num_heads=2, head_dim=8, num_v_heads=4, ccq=CCQConfig(), kernel=kernel,
                                    rngs=nnx.Rngs(0)))
    x = inputs(3)
    full, _ = call(layer, x, SEGMENTS)
    cache = layer.init_cache(x.shape[0])
    outs, start = [], 0
    for size in (9, 1, 9):
        y, cache = call(layer, x[:, start:start + size], SEGMENTS[:, start:start + size], cache)
        outs.append(y)
        start += size
    assert rel_rms(jnp.concatenate(outs, axis=1), full) < 1e-5


@pytest.mark.parametrize("kw,match", [(dict(safe_gate=True), "lower_bound: must be set when safe_gate"),
                                      (dict(lower_bound=0.0), "lower_bound: expected a negative"),
                                      (dict(lower_bound=1.0), "lower_bound"),
                                      (dict(num_v_heads=3), "num_v_heads")])
def test_kda_refuses_bad_options_by_name(kw, match):
    with pytest.raises(ValueError, match=match):
        KimiDeltaAttention(D, num_heads=2, head_dim=8, rngs=nnx.Rngs(0), **kw)
