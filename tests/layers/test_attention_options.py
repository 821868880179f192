"""`Attention`'s options (sliding window, qkv biases, partial RoPE and NoPE, output gate, GQA / MQA) against the
float64 NumPy softmax with explicit masks, with packed documents; through the KV cache (a windowed layer's ring of
the last window_size tokens) piece by piece and token by token; and its checks of bad options."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.layers import Attention
from tests.layers import numpy_layers as ref
from tests.builders import call, D, layer_inputs as inputs, layer_params as params, randomize, rel_rms, SEGMENTS

TOL = 2e-5  # fp32 layer vs float64 NumPy, as for the other mixers

# (kv heads, documents, window, rotary_dim, output gate, qkv bias): every option at least once, D = 32, 4 heads of 8
CASES = [(2, True, 4, None, False, False), (None, True, None, 4, True, True), (1, False, 3, 0, True, False),
         (2, True, 6, 2, False, True), (None, True, 1, None, False, False)]


def _layer(kv_heads, window, rotary_dim, gate, bias):
    return randomize(Attention(D, num_heads=4, num_kv_heads=kv_heads, rope_theta=500.0, window_size=window,
                               rotary_dim=rotary_dim, output_gate=gate, qkv_bias=bias, rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("kv_heads,segments,window,rotary_dim,gate,bias", CASES)
def test_attention_options_match_numpy(kv_heads, segments, window, rotary_dim, gate, bias):
    layer = _layer(kv_heads, window, rotary_dim, gate, bias)
    seg = SEGMENTS if segments else None
    y, _ = call(layer, inputs(), seg)
    expected = ref.attention(params(layer), inputs(), num_heads=4, num_kv_heads=kv_heads or 4, theta=500.0,
                             segment_ids=seg, window=window, rotary_dim=rotary_dim)
    assert rel_rms(y, expected) < TOL


def test_parameter_names_follow_fla_with_the_gate_as_g_proj():
    names = set(params(_layer(2, None, None, True, True)))
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "g_proj"}
    layer = _layer(2, None, None, True, True)
    assert {n for n in ("q_proj", "k_proj", "v_proj") if "bias" in params(layer)[n]} == {"q_proj", "k_proj", "v_proj"}
    assert "bias" not in params(layer)["o_proj"] and "bias" not in params(layer)["g_proj"]
    assert set(params(_layer(2, None, None, False, False))) == {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.parametrize("window,sizes", [(5, (9, 1, 9)), (3, (1,) * 19), (30, (7, 12)), (1, (5, 1, 13))])
def test_a_windowed_cache_continued_piece_by_piece_equals_one_call(window, sizes):
    """Pieces through a ring of min(window, max_length) slots = one pass; pieces longer than the ring too. A call
    with a cache continues the cached document, so documents start inside pieces (token by token: one document)."""
    layer = _layer(2, window, 4, True, False)
    x = inputs(3)
    segments = SEGMENTS if sizes[0] > 4 else None
    full, _ = call(layer, x, segments)
    cache = layer.init_cache(x.shape[0], x.shape[1])
    assert cache.key.shape[1] == min(window, x.shape[1])
    outs, start = [], 0
    for size in sizes:
        piece = None if segments is None else segments[:, start:start + size]
        y, cache = call(layer, x[:, start:start + size], piece, cache)
        outs.append(y)
        start += size
    assert int(cache.index) == x.shape[1]
    assert rel_rms(jnp.concatenate(outs, axis=1), full) < 1e-5


def test_a_windowed_cache_holds_window_size_slots_whatever_the_length():
    layer = Attention(D, num_heads=4, num_kv_heads=2, window_size=8, rngs=nnx.Rngs(0))
    full = Attention(D, num_heads=4, num_kv_heads=2, rngs=nnx.Rngs(0))
    assert layer.init_cache(2, 4096).key.shape == (2, 8, 2, 8)
    assert full.init_cache(2, 4096).key.shape == (2, 4096, 2, 8)


BAD = [
    (dict(rotary_dim=3), "rotary_dim: expected an even number of channels <= the head dim"),
    (dict(rotary_dim=10), "rotary_dim: expected an even number of channels <= the head dim hidden_size / num_heads "
                          "= 8 (0: no RoPE), got 10"),
    (dict(rotary_dim=-2), "rotary_dim: expected an integer >= 0, got -2"),
    (dict(window_size=0), "window_size: expected an integer >= 1, got 0"),
    (dict(qkv_bias=1), "qkv_bias: expected a bool, got 1"),
    (dict(output_gate="yes"), "output_gate: expected a bool, got 'yes'"),
    (dict(num_heads=3), "hidden_size: must be divisible by num_heads = 3, got 32"),
]


@pytest.mark.parametrize("options,message", BAD)
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Attention(D, **{"num_heads": 4, **options}, rngs=nnx.Rngs(0))


def test_nope_with_an_odd_head_dim_needs_no_even_split():
    layer = randomize(Attention(36, num_heads=4, rotary_dim=0, rngs=nnx.Rngs(0)))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 7, 36)), jnp.float32)
    y, _ = call(layer, x)
    expected = ref.attention(params(layer), x, num_heads=4, num_kv_heads=4, theta=10000.0, rotary_dim=0)
    assert rel_rms(y, expected) < TOL
