"""Configs and presets: every preset builds, bad values and unknown keys raise ValueErrors naming the field."""

import dataclasses

import pytest

from ccq_jax.models import (
    PRESETS, CCQConfig, GatedDeltaNetConfig, GLAConfig, TransformerConfig, config_from_dict, get_config,
)
from ccq_jax.models.__main__ import main


def test_preset_names():
    sizes = ("tiny", "340m", "1.3b")
    expected = {f"{f}-{s}" for f in ("transformer", "gla", "gdn", "ccq-gla", "ccq-gdn") for s in sizes}
    assert set(PRESETS) == expected
    assert all(get_config(name).ccq is not None for name in PRESETS if name.startswith("ccq-"))


def test_1_3b_presets_are_fla_defaults():
    assert get_config("gla-1.3b") == GLAConfig()
    assert get_config("gdn-1.3b") == GatedDeltaNetConfig()
    assert get_config("transformer-1.3b") == TransformerConfig()
    gla, gdn = GLAConfig(), GatedDeltaNetConfig()
    assert (gla.hidden_size, gla.num_hidden_layers, gla.num_heads, gla.expand_k, gla.expand_v) == (2048, 24, 4, 0.5, 1.0)
    assert (gdn.num_hidden_layers, gdn.num_heads, gdn.head_dim, gdn.expand_v, gdn.use_short_conv) == (21, 6, 256, 2.0, True)


BAD = [
    ("transformer-tiny", dict(num_heads=5), "hidden_size: must be divisible by num_heads = 5, got 64"),
    ("transformer-tiny", dict(num_kv_heads=3), "num_kv_heads: must divide num_heads = 4, got 3"),
    ("gla-tiny", dict(hidden_size=60), "expand_k: int(hidden_size * expand_k) = 30 must be a positive multiple of "
                                       "num_heads = 4"),
    ("gla-tiny", dict(clamp_min=0.5), "clamp_min: expected a value in [-inf, 0], got 0.5"),
    ("gdn-tiny", dict(conv_size=0), "conv_size: expected an integer >= 1, got 0"),
    ("gdn-tiny", dict(num_v_heads=3), "num_v_heads: must be a multiple of num_heads = 2, got 3"),
    ("gdn-tiny", dict(expand_v=0.3), "expand_v: head_dim * expand_v = 4.8 must be a positive integer"),
    ("gla-tiny", dict(vocab_size=0), "vocab_size: expected an integer >= 1, got 0"),
    ("gla-tiny", dict(num_hidden_layers=2.0), "num_hidden_layers: expected an integer, got 2.0"),
    ("gla-tiny", dict(dtype="fp32"), "dtype: expected one of ['bfloat16', 'float16', 'float32'], got 'fp32'"),
    ("gla-tiny", dict(attn_impl="cuda"), "attn_impl: expected one of"),
    ("gla-tiny", dict(chunk_size=0), "chunk_size: expected an integer >= 1, got 0"),
    ("gla-tiny", dict(use_short_conv="yes"), "use_short_conv: expected True or False, got 'yes'"),
    ("transformer-tiny", dict(attn_impl="chunk"), "attn_impl: expected one of [None, 'cudnn', 'xla'], got 'chunk'"),
    ("ccq-gla-tiny", dict(ccq={"mode": "sometimes"}), "ccq.mode: expected one of ['fixed', 'learned', 'off'], got "
                                                      "'sometimes'"),
    ("ccq-gla-tiny", dict(ccq={"fixed_lambda": 1.5}), "ccq.fixed_lambda: expected a value in [0.0, 1.0], got 1.5"),
    ("ccq-gla-tiny", dict(ccq={"mdoe": "off"}), "CCQConfig: unknown field 'mdoe'; did you mean 'mode'?"),
    ("gla-tiny", dict(ccq=0.1), "ccq: expected a CCQConfig, a dict of its fields or None, got 0.1"),
    ("gla-tiny", dict(hiden_size=64), "GLAConfig: unknown field 'hiden_size'; did you mean 'hidden_size'?"),
    ("transformer-tiny", dict(ccq=None), "TransformerConfig: unknown field 'ccq'"),
]


@pytest.mark.parametrize("name,overrides,message", BAD)
def test_bad_fields_raise_naming_the_field(name, overrides, message):
    with pytest.raises(ValueError) as err:
        get_config(name, **overrides)
    assert message in str(err.value)


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(ValueError, match=r"name: unknown preset 'gla-tni'; did you mean 'gla-tiny'\?"):
        get_config("gla-tni")


def test_constructor_rejects_unknown_keys_and_configs_are_frozen():
    with pytest.raises(ValueError, match="GatedDeltaNetConfig: unknown field 'head_dims'; did you mean 'head_dim'"):
        GatedDeltaNetConfig(head_dims=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_config("gla-tiny").hidden_size = 32


def test_overrides():
    cfg = get_config("ccq-gdn-tiny", dtype="bfloat16", ccq={"mode": "fixed", "fixed_lambda": 0.3})
    assert cfg.dtype == "bfloat16" and cfg.ccq == CCQConfig(mode="fixed", fixed_lambda=0.3)
    assert get_config("ccq-gla-tiny", ccq=None).ccq is None
    assert get_config("gla-tiny", ccq={"mode": "off"}).ccq == CCQConfig(mode="off")
    assert get_config("gla-tiny", use_short_conv=True).replace(conv_size=2).conv_size == 2


@pytest.mark.parametrize("name", ["transformer-tiny", "ccq-gla-340m", "ccq-gdn-1.3b"])
def test_dict_round_trip(name):
    cfg = get_config(name)
    assert config_from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="family: expected one of \\['gdn', 'gla', 'transformer'\\], got 'rnn'"):
        config_from_dict({**cfg.to_dict(), "family": "rnn"})


def test_cli_prints_parameter_counts(capsys):
    main(["gla-tiny", "ccq-gla-tiny", "--set", "ccq.fixed_lambda=0.2"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["preset", "family", "layers", "width", "parameters"]
    assert out[1].split()[:5] == ["gla-tiny", "gla", "2", "64", "167,400"]  # the CCQ gates come from --set
    with pytest.raises(SystemExit):
        main(["gla-tiny", "--set", "hiden_size=3"])
    assert "did you mean 'hidden_size'" in capsys.readouterr().err
