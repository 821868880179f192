"""Conversions are exact: ours -> fla -> ours, fla -> ours -> fla (the goldens), ours -> native -> ours."""

import json

import numpy as np
import pytest

from ccq_jax.convert import config_from_fla, load_fla_checkpoint, save_fla_checkpoint
from ccq_jax.models.files import SAFETENSORS_INDEX, read_state_dict
from ccq_jax.convert.native import load_model, save_model
from tests.builders import assert_same_params, FIXTURES, GOLDENS, random_model

MODELS = {
    "gla": ("gla-tiny", dict(dtype="bfloat16", param_dtype="bfloat16", use_short_conv=True, num_kv_heads=2,
                             clamp_min=-0.1)),
    "ccq-gla": ("ccq-gla-tiny", dict(use_output_gate=False, tie_word_embeddings=True)),
    "ccq-gdn": ("ccq-gdn-tiny", dict(num_v_heads=4, allow_neg_eigval=True, ccq={"mode": "fixed"})),
    "kda": ("kda-tiny", dict(num_v_heads=4, allow_neg_eigval=True, safe_gate=True, lower_bound=-5.0)),
    "gla-hybrid": ("gla-tiny", dict(attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True})),
    "ccq-gdn-hybrid": ("ccq-gdn-tiny", dict(attn=[{"layers": [0], "num_heads": 2, "window_size": 8},
                                                  {"layers": [1], "num_heads": 4, "rope_theta": 5e5}])),
    "mamba2": ("mamba2-tiny", dict(n_groups=2, D_has_hdim=True, use_bias=True, dt_limit=(0.0, 0.5))),
    "ccq-mamba2": ("ccq-mamba2-tiny", dict(dtype="bfloat16", param_dtype="bfloat16", tie_word_embeddings=True,
                                          use_conv_bias=False, rmsnorm=False)),
}


@pytest.mark.parametrize("case", list(MODELS))
def test_ours_to_fla_to_ours_is_bit_exact(case, tmp_path):
    name, overrides = MODELS[case]
    model = random_model(name, **overrides)
    save_fla_checkpoint(model, tmp_path)
    config, back = load_fla_checkpoint(tmp_path)
    assert config == model.config
    assert_same_params(back, model)


def test_sharded_checkpoints_round_trip(tmp_path):
    model = random_model("gdn-tiny")
    save_fla_checkpoint(model, tmp_path, max_shard_bytes=50_000)
    index = json.loads((tmp_path / SAFETENSORS_INDEX).read_text())
    assert len(set(index["weight_map"].values())) > 3
    assert not (tmp_path / "model.safetensors").exists()
    assert_same_params(load_fla_checkpoint(tmp_path)[1], model)
    save_fla_checkpoint(model, tmp_path)  # one file again: the shards of the first save are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("case", GOLDENS)
def test_fla_to_ours_to_fla_gives_the_same_tensors(case, tmp_path):
    _, model = load_fla_checkpoint(FIXTURES / case)
    save_fla_checkpoint(model, tmp_path)
    original, saved = read_state_dict(FIXTURES / case), read_state_dict(tmp_path)
    assert sorted(saved) == sorted(original)
    for name, array in original.items():
        np.testing.assert_array_equal(saved[name], array, strict=True, err_msg=name)
    fla_config = lambda folder: json.loads((folder / "config.json").read_text())  # noqa: E731
    assert config_from_fla(fla_config(tmp_path)) == config_from_fla(fla_config(FIXTURES / case))


def test_native_folders_round_trip(tmp_path):
    model = random_model("ccq-gla-tiny", param_dtype="bfloat16", **{"kernel.chunk_size": 16})
    save_model(model, tmp_path)
    config, back = load_model(tmp_path)
    assert config == model.config
    assert_same_params(back, model)
