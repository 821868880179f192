"""Configs and presets: every preset builds, bad values and unknown keys raise ValueErrors naming the field."""

import dataclasses
import json

import pytest

from ccq_jax.models import (
    PRESETS, CCQConfig, GatedDeltaNetConfig, GLAConfig, KernelPolicy, Mamba2Config, TransformerConfig, config_from_dict,
    get_config,
)
from ccq_jax.models.config import saved_overrides
from ccq_jax.ops import OpsAxes
from ccq_jax.models.__main__ import main


def test_preset_names():
    sizes = ("tiny", "100m", "340m", "1.3b")
    expected = {f"{f}-{s}" for f in ("transformer", "gla", "gdn", "ccq-gla", "ccq-gdn") for s in sizes}
    expected |= {f"{ccq}{f}-hybrid-tiny" for f in ("gla", "gdn") for ccq in ("", "ccq-")}
    expected |= {"gdn-hybrid-1.3b", "ccq-gdn-hybrid-1.3b"}
    expected |= {f"{ccq}{f}-{s}" for f in ("kda", "gdn2") for ccq in ("", "ccq-") for s in ("tiny", "1.3b")}
    expected |= {f"{ccq}mamba2-{s}" for ccq in ("", "ccq-") for s in ("tiny", "1.3b", "hybrid-tiny")}
    assert set(PRESETS) == expected
    assert all(get_config(name).ccq is not None for name in PRESETS if name.startswith("ccq-"))


def test_1_3b_presets_are_fla_defaults():
    assert get_config("gla-1.3b") == GLAConfig()
    assert get_config("gdn-1.3b") == GatedDeltaNetConfig()
    assert get_config("transformer-1.3b") == TransformerConfig()
    assert get_config("mamba2-1.3b") == Mamba2Config()
    gla, gdn = GLAConfig(), GatedDeltaNetConfig()
    assert (gla.hidden_size, gla.num_hidden_layers, gla.num_heads, gla.expand_k, gla.expand_v) == (2048, 24, 4, 0.5, 1)
    assert (gdn.num_hidden_layers, gdn.num_heads, gdn.head_dim, gdn.expand_v) == (21, 6, 256, 2)
    assert gdn.use_short_conv and gdn.use_gate and not gla.use_short_conv


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
    ("gla-tiny", dict(num_hidden_layers=2.0), "num_hidden_layers: expected int, got float 2.0"),
    ("gla-tiny", dict(dtype="fp32"), "dtype: expected Literal['float32', 'bfloat16', 'float16'], got str 'fp32'"),
    ("gla-tiny", {"kernel.impl": "cuda"}, "kernel.impl: unknown value 'cuda'; expected one of"),
    ("gla-tiny", {"kernel.decode_impl": "fused"}, "kernel.decode_impl: unknown value 'fused'; expected one of"),
    ("gla-tiny", {"kernel.chunk_size": 0}, "kernel.chunk_size: expected an integer >= 1, got 0"),
    ("gla-tiny", {"kernel.imp": "pallas"}, "kernel.imp: unknown key (did you mean 'impl'?)"),
    ("gla-tiny", dict(use_short_conv="yes"), "use_short_conv: expected bool, got str 'yes'"),
    ("transformer-tiny", dict(sdpa_impl="chunk"),
     "sdpa_impl: expected Optional[Literal['xla', 'cudnn', 'splash']], got str"),
    ("transformer-tiny", {"kernel.impl": "pallas"},
     "kernel.impl: the Transformer has no linear-attention reads (its attention backend is sdpa_impl)"),
    ("transformer-tiny", {"kernel.chunk_size": 16}, "kernel.chunk_size: the Transformer has no linear-attention"),
    ("ccq-gla-tiny", {"ccq.mode": "sometimes"},
     "ccq.mode: expected Literal['learned', 'fixed', 'off'], got str 'sometimes'"),
    ("ccq-gla-tiny", {"ccq.fixed_lambda": 1.5}, "ccq.fixed_lambda: expected a value in [0.0, 1.0], got 1.5"),
    ("ccq-gla-tiny", {"ccq.mdoe": "off"}, "ccq.mdoe: unknown key (did you mean 'mode'?)"),
    ("ccq-gla-tiny", {"ccq.read": "newton"},
     "ccq.read: expected Literal['first_order', 'neumann', 'cg'], got str 'newton'"),
    ("ccq-gla-tiny", {"ccq.lambda_max": 4.0}, "ccq.lambda_max: above 1 only with ccq.read='cg'"),
    ("ccq-gla-tiny", {"ccq.read": "cg", "ccq.lambda_max": 0.0}, "ccq.lambda_max: expected a value in (0.0"),
    ("ccq-gla-tiny", {"ccq.read": "cg", "ccq.iterations": 0}, "ccq.iterations: expected"),
    ("ccq-gla-tiny", {"ccq.read": "cg", "kernel.impl": "pallas"},
     "kernel.impl: ccq.read='cg' runs on the XLA forms ['recurrent', 'chunk', 'scan']; the kernels compute"),
    ("ccq-gdn-tiny", {"ccq.read": "neumann", "kernel.decode_impl": "pallas_triton"},
     "kernel.decode_impl: ccq.read='neumann'"),
    ("gla-tiny", {"ccq.mode": "off"}, "ccq: is not a nested config, cannot set 'ccq.mode'"),
    ("gla-tiny", dict(ccq=0.1), "ccq: expected ccq_jax.layers.ccq.CCQConfig | None, got float 0.1"),
    ("gla-tiny", dict(hiden_size=64), "hiden_size: unknown key (did you mean 'hidden_size'?)"),
    ("transformer-tiny", dict(ccq=None), "ccq: unknown key"),
    ("gla-tiny", {"kernel.head_impl": "cublas"},
     "kernel.head_impl: expected Literal['xla', 'pallas'], got str 'cublas'"),
    ("transformer-tiny", {"kernel.head_impl": "pallas", "vocab_size": 250},
     "kernel.head_impl: 'pallas' needs vocab_size and hidden_size multiples of 16, got 250 and 64"),
    ("transformer-tiny", {"kernel.interpret": True},
     "kernel.interpret: kernel.impl='chunk', kernel.decode_impl='recurrent', kernel.head_impl='xla' run no kernels"),
    ("gla-tiny", dict(kernel=0.1), "kernel: expected KernelPolicy, got float 0.1"),
    # the flat kernel keys of before the kernel policy, as overrides: refused, naming the key now
    ("gla-tiny", dict(attn_impl="pallas"), "attn_impl: renamed to kernel.impl (e.g. kernel.impl='pallas')"),
    ("ccq-gdn-tiny", dict(decode_impl="pallas"), "decode_impl: renamed to kernel.decode_impl"),
    ("gla-tiny", dict(chunk_size=16), "chunk_size: renamed to kernel.chunk_size"),
    ("transformer-tiny", dict(head_impl="pallas"), "head_impl: renamed to kernel.head_impl"),
    ("gdn-tiny", dict(interpret=False), "interpret: renamed to kernel.interpret"),
    ("transformer-tiny", dict(attn_impl="cudnn"), "attn_impl: renamed to sdpa_impl (e.g. sdpa_impl='cudnn')"),
    ("gla-tni", {}, "name: unknown value 'gla-tni'; expected one of ('transformer-tiny',"),
]


@pytest.mark.parametrize("name,overrides,message", BAD)
def test_bad_fields_raise_naming_the_field(name, overrides, message):
    with pytest.raises(ValueError) as err:
        get_config(name, **overrides)
    assert message in str(err.value)
    if name == "gla-tni":
        assert str(err.value).endswith("(did you mean 'gla-tiny'?)")


def test_configs_are_frozen_and_keyword_only():
    with pytest.raises(TypeError, match="unexpected keyword argument 'head_dims'"):
        GatedDeltaNetConfig(head_dims=64)
    with pytest.raises(TypeError):
        GLAConfig(32000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_config("gla-tiny").hidden_size = 32


def test_overrides():
    cfg = get_config("ccq-gdn-tiny", dtype="bfloat16", **{"ccq.mode": "fixed", "ccq.fixed_lambda": 0.3})
    assert cfg.dtype == "bfloat16" and cfg.ccq == CCQConfig(mode="fixed", fixed_lambda=0.3)
    assert get_config("ccq-gla-tiny", ccq=None).ccq is None
    assert get_config("gla-tiny", ccq={"mode": "off"}).ccq == CCQConfig(mode="off")
    assert get_config("ccq-gla-tiny", ccq=CCQConfig(centered=False)).ccq.centered is False


@pytest.mark.parametrize("name", ["transformer-tiny", "ccq-gla-340m", "ccq-gdn-1.3b"])
def test_dict_round_trip(name):
    cfg = get_config(name)
    assert config_from_dict(cfg.to_dict()) == cfg
    expected = r"family: unknown value 'rnn'; expected one of \('transformer', 'gla', 'gdn', 'mamba2', 'kda', 'gdn2'\)"
    with pytest.raises(ValueError, match=expected):
        config_from_dict({**cfg.to_dict(), "family": "rnn"})


# (preset, the flat kernel fields of a config saved before the kernel policy, the same config's fields now)
OLD_FORMAT = [
    ("gla-tiny", dict(attn_impl="pallas", decode_impl="pallas", chunk_size=16, head_impl="pallas", interpret=False),
     dict(kernel=KernelPolicy(impl="pallas", decode_impl="pallas", chunk_size=16, head_impl="pallas",
                              interpret=False))),
    ("ccq-gdn-tiny", dict(attn_impl="chunk", decode_impl="recurrent", chunk_size=None, head_impl="xla",
                          interpret=None), {}),
    ("transformer-tiny", dict(attn_impl="cudnn", head_impl="pallas", interpret=True),
     {"sdpa_impl": "cudnn", "kernel.head_impl": "pallas", "kernel.interpret": True}),
]


@pytest.mark.parametrize("name,old,now", OLD_FORMAT)
def test_a_config_saved_before_the_kernel_policy_loads_to_the_same_config(name, old, now):
    cfg = get_config(name, **now)
    saved = {**{k: v for k, v in cfg.to_dict().items() if k != "kernel"}, **old}
    assert config_from_dict(saved) == cfg
    assert get_config(name, **saved_overrides(cfg.family, old)) == cfg  # a run's stored model_overrides


def test_kernel_overrides_reach_into_the_policy():
    cfg = get_config("gla-tiny", **{"kernel.impl": "pallas", "kernel.chunk_size": 32})
    assert cfg.kernel == KernelPolicy(impl="pallas", chunk_size=32)
    assert get_config("gla-tiny", kernel={"decode_impl": "pallas"}).kernel == KernelPolicy(decode_impl="pallas")
    assert config_from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["kernel"]["impl"] == "pallas"
    with pytest.raises(ValueError, match="kernel.impl: unknown value 'cuda'"):
        KernelPolicy(impl="cuda")


def test_the_kernel_axes_round_trip_through_json_and_a_config_json_without_them_loads():
    axes = OpsAxes(batch=("data", "fsdp"), heads=("tensor",), context="context")
    cfg = get_config("ccq-gla-tiny", **{"kernel.axes": axes})
    saved = json.loads(json.dumps(cfg.to_dict()))
    assert saved["kernel"]["axes"] == {"batch": ["data", "fsdp"], "heads": ["tensor"], "context": "context"}
    assert config_from_dict(saved) == cfg
    del saved["kernel"]["axes"]  # a config.json written before the policy had axes
    loaded = config_from_dict(saved)
    assert loaded.kernel.axes == OpsAxes() and loaded == dataclasses.replace(cfg, kernel=KernelPolicy())
    with pytest.raises(ValueError, match=r"axes.batch: expected a tuple of mesh axis names, got \(1,\)"):
        get_config("gla-tiny", **{"kernel.axes.batch": [1]})
    with pytest.raises(ValueError, match=r"axes: a mesh axis splits one dimension only"):
        OpsAxes(batch=("data",), heads=("data",))


def test_cli_prints_parameter_counts(capsys):
    main(["gla-tiny", "ccq-gla-tiny", "--set", "tie_word_embeddings=true"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["preset", "family", "layers", "width", "parameters"]
    assert out[1].split()[:5] == ["gla-tiny", "gla", "2", "64", "150,944"]  # 167,328 less the untied LM head
    assert out[2].split()[:5] == ["ccq-gla-tiny", "gla", "2", "64", "151,016"]  # + 2 layers x 4 heads x (8 + 1)
    with pytest.raises(SystemExit):
        main(["gla-tiny", "--set", "hiden_size=3"])
    assert "hiden_size: unknown key (did you mean 'hidden_size'?)" in capsys.readouterr().err
