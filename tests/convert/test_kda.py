"""KDA with fla's names: fla's config.json fields both ways, fla's state_dict names and torch layouts (KDA's and
GDN-2's layers), and what fla's format cannot hold refused by name (round trips: tests/convert/test_round_trip.py)."""

import re

import pytest

from ccq_jax.convert import config_from_fla, config_to_fla
from ccq_jax.models import KDAConfig, get_config
from ccq_jax.models.state_dict import to_state_dict
from tests.builders import random_model

# every field of fla 0.6's KDAConfig (fla/models/kda/configuration_kda.py) and what PretrainedConfig adds to it
FLA_KDA = {
    "model_type": "kda", "architectures": ["KDAForCausalLM"], "attn_mode": "chunk", "hidden_size": 64,
    "expand_v": 2.0, "use_short_conv": True, "allow_neg_eigval": True, "safe_gate": True, "lower_bound": -5.0,
    "conv_size": 3, "head_dim": 16, "num_heads": 2, "num_v_heads": 4, "max_position_embeddings": 2048,
    "hidden_ratio": 4, "intermediate_size": None, "hidden_act": "swish", "num_hidden_layers": 2, "norm_eps": 1e-6,
    "attn": None, "use_cache": True, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "initializer_range": 0.02, "fuse_norm": True, "fuse_swiglu": True,
    "fuse_cross_entropy": True, "use_l2warp": False, "vocab_size": 256, "attnres_block_size": None,
    "dtype": "bfloat16", "transformers_version": "4.57.1",
}


def test_fla_kda_config_maps_both_ways():
    cfg = config_from_fla(FLA_KDA)
    assert cfg == KDAConfig(hidden_size=64, expand_v=2.0, allow_neg_eigval=True, safe_gate=True, lower_bound=-5.0,
                            conv_size=3, head_dim=16, num_heads=2, num_v_heads=4, num_hidden_layers=2,
                            vocab_size=256, dtype="bfloat16", param_dtype="bfloat16")
    out = config_to_fla(cfg)
    assert out["model_type"] == "kda" and out["architectures"] == ["KDAForCausalLM"]
    assert {k: out[k] for k in FLA_KDA if k in out and k != "architectures"} == {
        k: v for k, v in FLA_KDA.items() if k in out and k != "architectures"}
    assert config_from_fla(out) == cfg


def test_fla_defaults_are_ours():
    assert config_from_fla({"model_type": "kda"}) == KDAConfig() == get_config("kda-1.3b")


def _layer_tensors(name, **overrides):
    """{fla name of layer 0's mixer: torch shape} of the preset with random parameters."""
    prefix = "model.layers.0.attn."
    return {k[len(prefix):]: v.shape for k, v in to_state_dict(random_model(name, **overrides)).items()
            if k.startswith(prefix)}


def test_kda_layer_has_fla_names_and_layouts():
    # D 64, H 2, HV 4, K 16, V 16: fla's KimiDeltaAttention(hidden_size=64, head_dim=16, num_heads=2, num_v_heads=4)
    assert _layer_tensors("ccq-kda-tiny", num_v_heads=4) == {
        "q_proj.weight": (32, 64), "k_proj.weight": (32, 64), "v_proj.weight": (64, 64),
        "q_conv1d.weight": (32, 1, 4), "k_conv1d.weight": (32, 1, 4), "v_conv1d.weight": (64, 1, 4),
        "f_proj.0.weight": (16, 64), "f_proj.1.weight": (64, 16), "b_proj.weight": (4, 64),
        "A_log": (4,), "dt_bias": (64,), "g_proj.0.weight": (16, 64), "g_proj.1.weight": (64, 16),
        "g_proj.1.bias": (64,), "o_norm.weight": (16,), "o_proj.weight": (64, 64),
        "ccq.weight": (4, 16), "ccq.bias": (4,)}


def test_gdn2_layer_has_fla_names_and_layouts():
    # fla's GatedDeltaNet2(hidden_size=64, head_dim=16, num_heads=2, num_v_heads=4): A_log, dt_bias, b per qk head
    assert _layer_tensors("gdn2-tiny", num_v_heads=4, use_short_conv=False) == {
        "q_proj.weight": (32, 64), "k_proj.weight": (32, 64), "v_proj.weight": (64, 64),
        "f_proj.0.weight": (16, 64), "f_proj.1.weight": (32, 16), "b_proj.weight": (32, 64),
        "w_proj.weight": (64, 64), "A_log": (2,), "dt_bias": (32,), "g_proj.0.weight": (16, 64),
        "g_proj.1.weight": (64, 16), "g_proj.1.bias": (64,), "o_norm.weight": (16,), "o_proj.weight": (64, 64)}


@pytest.mark.parametrize("name, message", [
    ("ccq-kda-tiny", "fla has no model for KDAConfig with CCQ"),
    ("gdn2-tiny", "fla has no model for GatedDeltaNet2Config"),
])
def test_what_fla_cannot_hold_is_refused(name, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        config_to_fla(get_config(name))


@pytest.mark.parametrize("fields, message", [
    ({"ccq": {}}, "'ccq' (the fla format has no CCQ kda model"),
    ({"safe_gate": True}, "lower_bound: must be set when safe_gate=True"),
    ({"lower_bound": 2.0}, "lower_bound"),
    ({"attnres_block_size": 2}, "attnres_block_size = 2 is not supported"),
    ({"num_v_heads": 3, "num_heads": 2}, "num_v_heads: must be a multiple of num_heads"),
])
def test_kda_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        config_from_fla({"model_type": "kda", **fields})
