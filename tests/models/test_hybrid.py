"""Hybrid models (fla's `attn` entry on a linear family, or Qwen3-Next's per-layer `layer_types`): bad specs refused
by name as fla refuses them, the dict and list forms and saved configs, each layer's mixer and fla's parameter names, the scanned layers, decoding equal
to the forward, generation with per-row prompt lengths, the cache's memory per sequence, FLOPs, and training."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.inference import cache_bytes_per_sequence, generate
from ccq_jax.layers import Attention, GatedDeltaNet, GatedLinearAttention
from ccq_jax.models import HybridAttention, config_from_dict, get_config, layer_mixers
from ccq_jax.models.causal_lm import scan_plan
from ccq_jax.models.flops import attention_forward_flops, mixer_forward_flops, train_flops_per_token
from tests.builders import logits_and_grads, FP32_TOL, HYBRID_CASES as CASES, build, forward, prefill_then_decode, rel_rms, token_ids
from tests.train.tiny_run import tiny_config
from train.loop import train
from train.metrics import read_metrics

T, PROMPT = 18, 11
SPEC = dict(layers=[1], num_heads=4)

BAD = [  # (attn, message): fla's error cases, then ccq-jax's own fields
    (dict(layers=[1, 1], num_heads=4), r"attn.layers: layer 1 is listed twice \(already in the same entry\)"),
    ([dict(layers=[0], num_heads=4), dict(layers=[2, 0], num_heads=2)],
     r"attn\[1\].layers: layer 0 is listed twice \(already in entry 0\)"),
    (dict(layers=[4], num_heads=4), r"attn.layers: layer 4 is out of range; expected a value in \[0, "
                                    r"num_hidden_layers=4\)"),
    (dict(layers=[-1], num_heads=4), "attn.layers: layer -1 is out of range"),
    (dict(layers=[1], num_heads=3), "attn.num_heads: must divide hidden_size = 64, got 3"),
    (dict(layers=[1], num_heads=4, num_kv_heads=3), "attn.num_kv_heads: must divide attn.num_heads = 4, got 3"),
    (dict(layers=[1], num_heads=0), "attn.num_heads: expected an integer >= 1, got 0"),
    (dict(num_heads=4), "attn.layers: required"),
    (dict(layers=[1], num_heads=4, window=8), r"attn.window: unknown key for HybridAttention \(did you mean "
                                              r"'window_size'\?\)"),
    ([SPEC, dict(layers=[2], num_heads=4, qkv_bais=True)], r"attn\[1\].qkv_bais: unknown key"),
    (dict(layers=[1], num_heads=4, window_size=0), "attn.window_size: expected an integer >= 1, got 0"),
    (dict(layers=[1], num_heads=4, rope_theta=-1.0), r"attn.rope_theta: expected a value in \(0"),
    (dict(layers=[1.0], num_heads=4), r"attn.layers: expected tuple\[int, ...\], got tuple"),
    (dict(layers=[1], num_heads=4, qkv_bias="no"), "attn.qkv_bias: expected bool"),
    (dict(layers=[1], num_heads=4, rotary_dim=5), "attn.rotary_dim: expected an even number of channels <= the head"),
    ([], "attn: expected None or at least one entry, got an empty list"),
]


@pytest.mark.parametrize("attn,message", BAD)
def test_bad_specs_are_refused_by_name(attn, message):
    with pytest.raises(ValueError, match=message):
        get_config("gla-tiny", num_hidden_layers=4, attn=attn)


def test_the_transformer_has_no_attn_entry():
    with pytest.raises(ValueError, match="attn: unknown key"):
        get_config("transformer-tiny", attn=SPEC)


def test_dict_and_list_forms_saved_configs_and_old_ones():
    one = get_config("gdn-tiny", attn=SPEC)
    assert one == get_config("gdn-tiny", attn=[SPEC]) == get_config("gdn-tiny", attn=(HybridAttention(
        layers=(1,), num_heads=4),))
    assert one.attn[0].num_kv_heads is None and one.attn[0].window_size is None and one.attn[0].rope_theta == 10000.0
    assert config_from_dict(one.to_dict()) == one
    assert one.to_dict()["attn"] == [dict(layers=[1], num_heads=4, num_kv_heads=None, qkv_bias=False,
                                          window_size=None, rope_theta=10000.0, rotary_dim=None, output_gate=False)]
    old = {k: v for k, v in get_config("gdn-tiny").to_dict().items() if k not in ("attn", "sdpa_impl")}
    assert config_from_dict(old) == get_config("gdn-tiny")  # saved before hybrids: unchanged
    assert layer_mixers(get_config("gla-1.3b")) == (None,) * 24


LINEAR, FULL, SLIDING = "linear_attention", "full_attention", "sliding_attention"
BAD_LAYER_TYPES = [  # (layer_types, attn, message)
    ([LINEAR] * 3, None, r"layer_types: expected one entry per layer \(num_hidden_layers=4\), got 3"),
    ([LINEAR] * 3 + ["full"], None, r"layer_types: expected tuple\[Literal\['linear_attention', 'full_attention', "
                                     r"'sliding_attention'\], ...\] \| None"),
    ([LINEAR] * 3 + [SLIDING], None, r"layer_types: layers \[3\] are 'sliding_attention', whose window comes from an "
                                      r"attn entry"),
    ([LINEAR] * 4, SPEC, r"layer_types\[1\]: 'linear_attention', but attn makes layer 1 'full_attention'"),
    ([LINEAR, SLIDING, LINEAR, LINEAR], SPEC, r"layer_types\[1\]: 'sliding_attention', but attn makes layer 1 "
                                              r"'full_attention'"),
    ([LINEAR, FULL, LINEAR, LINEAR], dict(SPEC, window_size=8), r"layer_types\[1\]: 'full_attention', but attn makes "
                                                                 r"layer 1 'sliding_attention'"),
]


def test_layer_types_are_the_per_layer_form_of_attn():
    qwen = [LINEAR, LINEAR, LINEAR, FULL]  # Qwen3-Next's pattern: full attention after every three linear layers
    cfg = get_config("gdn-tiny", num_hidden_layers=4, layer_types=qwen)
    assert cfg.attn == (HybridAttention(layers=(3,), num_heads=cfg.num_heads),)
    assert layer_mixers(cfg) == (None, None, None, cfg.attn[0])
    assert config_from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["layer_types"] == qwen
    both = get_config("gla-tiny", num_hidden_layers=4, layer_types=[LINEAR, SLIDING, LINEAR, FULL],
                      attn=[dict(SPEC, window_size=8), dict(layers=[3], num_heads=2)])
    assert [spec.window_size if spec else None for spec in layer_mixers(both)] == [None, 8, None, None]
    assert layer_mixers(both)[3].num_heads == 2
    assert get_config("gla-tiny", num_hidden_layers=4, layer_types=[LINEAR] * 4).attn is None


@pytest.mark.parametrize("layer_types,attn,message", BAD_LAYER_TYPES)
def test_bad_layer_types_are_refused_by_name(layer_types, attn, message):
    with pytest.raises(ValueError, match=message):
        get_config("gla-tiny", num_hidden_layers=4, layer_types=layer_types, attn=attn)


def test_layer_types_refuse_attention_without_heads_to_give_it():
    with pytest.raises(ValueError, match=r"layer_types \(full attention with the model's num_heads, attn not given\): "
                                         r"num_heads: must divide hidden_size = 64, got 3"):
        get_config("gdn-tiny", num_hidden_layers=2, num_heads=3, layer_types=[FULL, LINEAR])
    with pytest.raises(ValueError, match=r"layer_types: layers \[0\] are 'full_attention', and this model has no "
                                         r"num_heads of its own"):
        get_config("mamba2-tiny", num_hidden_layers=2, layer_types=[FULL, LINEAR])


def test_each_layer_gets_its_mixer_and_fla_s_parameter_names():
    model = build(*CASES["ccq-gla-hybrid-options"])
    kinds = [type(layer.attn) for layer in model.layers]
    assert kinds == [GatedLinearAttention, Attention, GatedLinearAttention, Attention]
    assert model.layers[1].attn.window_size == 5 and model.layers[3].attn.rotary_dim == 0
    names = {".".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert {n for n in names if n.startswith("layers.1.attn.")} == {
        f"layers.1.attn.{p}.{w}" for p in ("q_proj", "k_proj", "v_proj") for w in ("kernel", "bias")} | {
        "layers.1.attn.o_proj.kernel", "layers.1.attn.g_proj.kernel"}
    assert "layers.0.attn.ccq.weight" in names and "layers.2.attn.gk_proj.0.kernel" in names  # CCQ per linear layer
    assert not any(n.startswith("layers.3.attn.ccq") for n in names)
    assert {type(layer.attn) for layer in build(*CASES["ccq-gdn-hybrid"]).layers} == {GatedDeltaNet, Attention}
    assert model(token_ids((2, 5))).shape == (2, 5, 256)


def test_scan_plan():
    assert scan_plan((None,) * 5) == [(0, 5, 1)]
    assert scan_plan(tuple("GGGA" * 5 + "G")) == [(0, 20, 4), (20, 21, 1)]
    assert scan_plan(tuple("GAGA")) == [(0, 4, 2)]
    assert scan_plan(tuple("GGGA")) == [(0, 3, 1), (3, 4, 1)]
    assert scan_plan(layer_mixers(get_config("gdn-hybrid-1.3b")))[0] == (0, 20, 4)


def _logits_and_grads(name, overrides, scan, remat):
    model = build(name, dict(overrides, scan_layers=scan, remat_policy=remat))
    ids = token_ids((2, T))
    segments = jnp.asarray([[0] * 4 + [1] * (T - 4), [3] * T], jnp.int32)
    return logits_and_grads(model, ids, segments)


@pytest.mark.parametrize("case,remat", [("gla-hybrid", "block"), ("ccq-gdn-hybrid", "elementwise"),
                                        ("ccq-gla-hybrid-options", "dots")])
def test_scanned_hybrid_layers_match_the_loop(case, remat):
    """gla-hybrid scans its period of two blocks; ccq-gdn-hybrid its three GDN layers, then calls the attention;
    ccq-gla-hybrid-options mixes blocks under "dots" (the linear ones) with attention blocks run as they are."""
    loop_logits, loop_grads = _logits_and_grads(*CASES[case], False, remat)
    scan_logits, scan_grads = _logits_and_grads(*CASES[case], True, remat)
    assert rel_rms(scan_logits, loop_logits) < 1e-5
    assert [path for path, _ in scan_grads] == [path for path, _ in loop_grads]
    for (path, s), (_, l) in zip(scan_grads, loop_grads):
        assert rel_rms(s.get_value(), l.get_value()) < FP32_TOL, path


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_then_decode_reproduces_the_full_forward(case):
    """Row 0 packs two documents (the second continues through decoding); the window (8 tokens, 5 with every
    option) is shorter than the rows, so the ring of the windowed layers wraps."""
    model = build(*CASES[case])
    ids = token_ids((3, T), seed=5)
    segments = jnp.asarray([[0] * 4 + [1] * (T - 4), [3] * T, [0] * T], jnp.int32)
    full = forward(model, ids, segments)
    assert rel_rms(prefill_then_decode(model, ids, segments, PROMPT), full) < 1e-5


@pytest.mark.parametrize("case", ["gla-hybrid", "ccq-gdn-hybrid"])
def test_rows_of_different_lengths_generate_as_if_alone(case):
    model = build(*CASES[case])
    prompts = token_ids((2, 12), seed=3)
    lengths = [12, 5]
    batch = generate(model, prompts.at[1, 5:].set(77), 6, prompt_lengths=jnp.asarray(lengths))
    for row, n in enumerate(lengths):
        np.testing.assert_array_equal(batch[row], generate(model, prompts[row:row + 1, :n], 6)[0])


def test_the_cache_memory_per_sequence():
    model = build(*CASES["ccq-gdn-hybrid"])  # one attention layer, 4 kv heads of 16, a window of 8 tokens
    kv = 2 * 8 * 4 * 16 * 4 + 8 * 4 + 2 * 4  # keys and values, slot documents, position and document
    report = cache_bytes_per_sequence(model, 4096)
    assert report["attention"] == kv
    assert report["recurrent"] == cache_bytes_per_sequence(build("ccq-gdn-tiny", {"num_hidden_layers": 3}),
                                                           4096)["recurrent"]
    assert report["total"] == report["attention"] + report["recurrent"]
    full = cache_bytes_per_sequence(build("gla-hybrid-tiny"), 100)["attention"]  # two layers, 2 kv heads of 16
    assert full == 2 * (2 * 100 * 2 * 16 * 4 + 100 * 4 + 2 * 4)


def test_flops_count_each_layer_as_its_mixer():
    cfg = get_config("gdn-hybrid-tiny")
    own = mixer_forward_flops(cfg, 64)
    assert train_flops_per_token(cfg, 64).mixer == pytest.approx(3 * (3 * own + attention_forward_flops(64, 64, 8)))
    assert attention_forward_flops(64, 64) == 2 * 65 * 64
    assert attention_forward_flops(64, 64, 8) == pytest.approx(4 * (36 + 56 * 8) / 64 * 64)


def test_a_hybrid_trains(tmp_path):
    cfg = tiny_config(model="ccq-gdn-hybrid-tiny", model_overrides={}, steps=3, checkpoint_every=0, eval_batches=0)
    train(cfg, tmp_path, progress=False)
    losses = [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert len(losses) == 3 and all(np.isfinite(losses))
