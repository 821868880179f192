"""Conversion errors name what is wrong: config fields, tensors, files."""

import importlib.util
import json
import re
import shutil

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from ccq_jax.convert import config_from_fla, config_to_fla, load_fla_checkpoint, save_fla_checkpoint
from ccq_jax.models.files import SAFETENSORS, read_state_dict
from ccq_jax.models import abstract_model, get_config
from tests.builders import assert_same_params, FIXTURES, flat_params as params

GLA = {"model_type": "gla", "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1, "vocab_size": 48}


def _copy(case, tmp_path, edit_config=None, edit_tensors=None):
    """A golden folder copied to tmp_path, its config.json and tensors edited."""
    folder = tmp_path / case
    shutil.copytree(FIXTURES / case, folder)
    if edit_config:
        config = json.loads((folder / "config.json").read_text())
        edit_config(config)
        (folder / "config.json").write_text(json.dumps(config))
    if edit_tensors:
        tensors = read_state_dict(folder)
        edit_tensors(tensors)
        save_file(tensors, folder / SAFETENSORS)
    return folder


@pytest.mark.parametrize("fields, message", [
    ({"model_type": "mamba"}, "model_type: unknown value 'mamba'"),
    ({"num_head": 2}, "'num_head' (did you mean 'num_heads'?)"),
    ({"hidden_act": "gelu"}, "hidden_act = 'gelu' is not supported; ccq-jax computes hidden_act in ('swish',)"),
    ({"feature_map": "relu"}, "feature_map = 'relu' is not supported"),
    ({"attn": {"layers": [0], "num_heads": 2, "qk_norm": True}}, "attn: keys unknown to the converter (they may "
     "change the math): ['qk_norm']"),
    ({"attn": [{"layers": [0], "num_heads": 2}, 3]}, "attn[1]: expected a dict, got 3"),
    ({"attn": {"layers": [1], "num_heads": 2}}, "attn.layers: layer 1 is out of range"),
    ({"dtype": "float64"}, "dtype: unknown value 'float64'"),
    ({"expand_k": 0.3}, "expand_k: int(hidden_size * expand_k) = 9 must be a positive multiple of num_heads"),
    ({"ccq": {}}, "'ccq' (a CCQ model has model_type 'ccq_gla')"),
])
def test_gla_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        config_from_fla({**GLA, **fields})


def test_ccq_and_gdn_config_errors():
    gdn = {"model_type": "gated_deltanet", "hidden_size": 32, "num_heads": 2, "head_dim": 8}
    with pytest.raises(ValueError, match=re.escape("output_gate_activation = 'sigmoid' is not supported")):
        config_from_fla({**gdn, "output_gate_activation": "sigmoid"})
    with pytest.raises(ValueError, match=re.escape("ccq.mod: unknown key for CCQConfig (did you mean 'mode'?)")):
        config_from_fla({**gdn, "model_type": "ccq_gated_deltanet", "ccq": {"mod": "fixed"}})


def test_config_mapping_follows_fla():
    config = config_from_fla({**GLA, "hidden_ratio": None, "torch_dtype": "bfloat16", "use_gk": False,
                              "fuse_norm": False, "bos_token_id": 5, "num_kv_heads": 1})
    assert (config.hidden_ratio, config.dtype, config.param_dtype, config.num_kv_heads) == (4, "bfloat16",
                                                                                            "bfloat16", 1)
    assert config_from_fla({"model_type": "gated_deltanet"}) == get_config("gdn-1.3b")  # fla's defaults are ours
    assert config_from_fla({"model_type": "ccq_gla", "ccq": {}}).ccq == get_config("ccq-gla-1.3b").ccq


def test_mamba2_config_maps_fla_fields_and_checks_the_derived_heads():
    fla = {"model_type": "mamba2", "num_heads": 64, "chunk_size": 128, "residual_in_fp32": False, "pad_token_id": 0,
           "A_init_range": [1, 16], "dt_limit": [0.0, float("inf")], "hidden_act": "silu"}
    assert config_from_fla(fla) == get_config("mamba2-1.3b")  # fla's defaults are ours; num_heads is not kept
    assert config_to_fla(get_config("mamba2-1.3b"))["num_heads"] == 64
    with pytest.raises(ValueError, match=re.escape("num_heads = 32 does not match the other sizes, which give 64")):
        config_from_fla({**fla, "num_heads": 32})
    with pytest.raises(ValueError, match="unknown to the mamba2 converter.*'hidden_ratio'"):
        config_from_fla({**fla, "hidden_ratio": 4})
    with pytest.raises(ValueError, match=re.escape("'ccq' (a CCQ model has model_type 'ccq_mamba2')")):
        config_from_fla({**fla, "ccq": {}})


def test_what_fla_cannot_express_is_refused():
    with pytest.raises(ValueError, match="fla has no model for TransformerConfig"):
        config_to_fla(get_config("transformer-tiny"))
    with pytest.raises(ValueError, match="gate_low_rank_dim = 8 cannot be saved: fla's GLA layer fixes it at 16"):
        config_to_fla(get_config("gla-tiny", gate_low_rank_dim=8))
    for name, value in (("rotary_dim", 8), ("output_gate", True)):
        hybrid = get_config("gdn-tiny", attn=[{"layers": [0], "num_heads": 2}, {"layers": [1], "num_heads": 2, name: value}])
        with pytest.raises(ValueError, match=re.escape(f"attn[1].{name} = {value!r} cannot be saved in fla's format")):
            config_to_fla(hybrid)
    with pytest.raises(ValueError, match="attn: fla's mamba2 has no hybrid form"):
        config_to_fla(get_config("mamba2-tiny", attn={"layers": [0], "num_heads": 2}))


def test_tensor_errors_name_the_tensors(tmp_path):
    missing = _copy("gla", tmp_path / "a", edit_tensors=lambda t: t.pop("model.layers.1.attn.g_proj.weight"))
    with pytest.raises(ValueError, match=r"missing \[model\.layers\.1\.attn\.g_proj\.weight\]; unexpected \[\]"):
        load_fla_checkpoint(missing)
    extra = _copy("gla", tmp_path / "b", edit_tensors=lambda t: t.update(
        {"model.layers.0.attn.g_proj.bias": np.zeros(32, np.float32)}))
    with pytest.raises(ValueError, match=r"unexpected \[model\.layers\.0\.attn\.g_proj\.bias\]"):
        load_fla_checkpoint(extra)
    shape = _copy("gla", tmp_path / "c", edit_config=lambda c: c.update(intermediate_size=32))
    with pytest.raises(ValueError, match=re.escape("shapes do not match the config: model.layers.0.mlp.down_proj"
                                                   ".weight (32, 64) (expected (32, 32)), model.layers.0.mlp.gate_")):
        load_fla_checkpoint(shape)


def test_tied_embeddings_must_be_tied(tmp_path):
    folder = _copy("gdn-gva", tmp_path, edit_tensors=lambda t: t.update(
        {"lm_head.weight": t["model.embeddings.weight"] + 1}))
    with pytest.raises(ValueError, match="tie_word_embeddings is set but lm_head.weight differs"):
        load_fla_checkpoint(folder)


def test_missing_files(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'config.json'}: not found")):
        load_fla_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(GLA))
    with pytest.raises(ValueError, match="no weights; expected one of model.safetensors, model.safetensors.index"):
        load_fla_checkpoint(tmp_path)
    for text, message in (("{", "not valid JSON"), ("[1]", "expected a JSON object")):
        (tmp_path / "config.json").write_text(text)
        with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'config.json'}: {message}")):
            load_fla_checkpoint(tmp_path)


def test_a_sharded_index_needs_a_weight_map(tmp_path):
    folder = _copy("gla", tmp_path)
    (folder / SAFETENSORS).unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'model.safetensors.index.json'}: expected a "
                                                   "'weight_map' object")):
        load_fla_checkpoint(folder)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_pytorch_bin_needs_torch(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GLA))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=re.escape("reading pytorch_model.bin needs torch")):
        load_fla_checkpoint(tmp_path)


def test_unfused_gla_norm_is_renamed(tmp_path):
    """fla's GLA with fuse_norm=False calls the gated output norm g_norm: same math, another name."""
    rename = lambda t: t.update({k.replace("g_norm_swish_gate", "g_norm"): t.pop(k) for k in list(t)  # noqa: E731
                                 if "g_norm_swish_gate" in k})
    folder = _copy("gla", tmp_path, edit_config=lambda c: c.update(fuse_norm=False), edit_tensors=rename)
    assert_same_params(load_fla_checkpoint(folder)[1], load_fla_checkpoint(FIXTURES / "gla")[1])


def test_save_refuses_a_transformer(tmp_path):
    with pytest.raises(ValueError, match="fla has no model for TransformerConfig"):
        save_fla_checkpoint(abstract_model(get_config("transformer-tiny")), tmp_path)


def test_pytorch_bin_is_read_when_torch_is_there(tmp_path):
    """Runs where torch is installed next to JAX (the GPU image); without JAX, `ccq_jax.models.files`
    was checked by hand from a torch-only Python (bf16, fp16, sharded index)."""
    torch = pytest.importorskip("torch")
    tensors = read_state_dict(FIXTURES / "gla")
    torch.save({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in tensors.items()}, tmp_path / "pytorch_model.bin")
    shutil.copy(FIXTURES / "gla" / "config.json", tmp_path)
    got = params(load_fla_checkpoint(tmp_path)[1])  # the config says float32: bf16 tensors are cast up exactly
    for path, value in params(load_fla_checkpoint(FIXTURES / "gla")[1]).items():
        np.testing.assert_array_equal(got[path], value.astype(ml_dtypes.bfloat16).astype(np.float32), strict=True)
