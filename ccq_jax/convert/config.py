"""fla config.json <-> ccq-jax model config: which fla fields map, which must hold a given value, which are ignored.

`config_from_fla(fla_config)` accepts the `config.json` of fla's `gla` / `gated_deltanet` / `mamba2` / `kda` models
(and of ccq-jax's CCQ types `ccq_gla` / `ccq_gated_deltanet` / `ccq_mamba2`, which add a `ccq` dict)
and returns a `GLAConfig` / `GatedDeltaNetConfig` / `Mamba2Config` (whose `num_heads`, derived, is checked, not
kept, and written back) / `KDAConfig`. Every field is one of:
- mapped: copied to the field of the same name (fla's `hidden_ratio: null` means 4, and
  `dtype` (`torch_dtype` in older files) becomes both `dtype` and `param_dtype`);
- required: a value fla supports but ccq-jax does not compute differently (`hidden_act` must be
  "swish", `feature_map` null, `attnres_block_size` absent, Mamba2's hybrid `attn` absent, ...);
- `attn` (GLA, Gated DeltaNet, KDA and their CCQ types): fla's hybrid entry (a dict or a list of dicts, fla's
  `parse_attention_config` form) <-> our tuple of `HybridAttention`s; an entry may hold only fla's Attention keys
  (`FLA_ATTN`), and ccq-jax's own (`OWN_ATTN`: partial RoPE `rotary_dim`, `output_gate`) are refused on export
  unless they hold the value that is fla's behaviour;
- ignored: it does not change the logits (token ids, kernel choices, fused losses, HF bookkeeping;
  `fuse_norm` only renames GLA's output norm, see `ccq_jax.convert.fla`).
Anything else raises a ValueError naming the field (with the closest known name); a required
field with another value raises a ValueError naming field, value and what is supported.
Missing fields take fla's defaults, which are ccq-jax's defaults. Special floats as transformers (>= 5) writes them,
`{"__float__": "Infinity"}` (Mamba2's `dt_limit`), are read as the floats.

`config_to_fla(config)` is the inverse (mapped fields plus `model_type`, `architectures`, `dtype`);
what fla cannot express (the Transformer family, GLA's `gate_low_rank_dim` /
`gate_logit_normalizer` other than fla's fixed 16, a hybrid's `rotary_dim` / `output_gate`, a Mamba2 hybrid)
raises a ValueError naming the field.
"""

import dataclasses
import typing
from typing import Any, Mapping

from ccq_jax import configlib
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.mamba2 import mamba2_dims
from ccq_jax.models.config import (
    DType, GatedDeltaNetConfig, GLAConfig, HybridAttention, KDAConfig, Mamba2Config, ModelConfig, apply_overrides,
)

COMMON = ("vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "hidden_ratio", "intermediate_size",
          "norm_eps", "initializer_range", "tie_word_embeddings", "use_short_conv", "conv_size")
MAPPED = {
    GLAConfig: COMMON + ("expand_k", "expand_v", "num_kv_heads", "use_output_gate", "clamp_min", "attn"),
    GatedDeltaNetConfig: COMMON + ("head_dim", "expand_v", "num_v_heads", "use_gate", "allow_neg_eigval", "attn"),
    Mamba2Config: ("vocab_size", "hidden_size", "num_hidden_layers", "norm_eps", "initializer_range",
                   "tie_word_embeddings", "head_dim", "state_size", "expand", "n_groups", "conv_kernel", "use_bias",
                   "use_conv_bias", "conv_init", "A_init_range", "D_has_hdim", "hidden_act", "dt_min", "dt_max",
                   "dt_init_floor", "dt_limit", "rescale_prenorm_residual", "rmsnorm", "norm_before_gate"),
    KDAConfig: COMMON + ("head_dim", "expand_v", "num_v_heads", "allow_neg_eigval", "safe_gate", "lower_bound",
                         "attn"),
}
# ccq-jax's own HybridAttention fields fla's Attention cannot express: the value that is fla's behaviour
OWN_ATTN = {"rotary_dim": None, "output_gate": False}
# the keys of an fla hybrid `attn` entry (what fla's get_attention passes to fla.layers.attn.Attention): the rest
FLA_ATTN = tuple(field.name for field in dataclasses.fields(HybridAttention) if field.name not in OWN_ATTN)
# fla's Mamba2 config stores num_heads, derived from expand * hidden_size / head_dim: checked, written, not kept
DERIVED = {Mamba2Config: ("num_heads",)}
REQUIRED = {  # field: allowed values (the first is what config_to_fla writes)
    "common": {"hidden_act": ("swish",), "attn": (None,), "attnres_block_size": (None,)},
    GLAConfig: {"feature_map": (None,), "elementwise_affine": (True,)},
    GatedDeltaNetConfig: {"output_gate_activation": ("swish", "silu")},
    Mamba2Config: {},
    KDAConfig: {},
}
# per family: fields that do not change the logits (Mamba2's SSD kernel chunk; its fp32 residual, which ccq-jax's
# residual stream matches: each block's sum is rounded once to the model's dtype either way)
IGNORED_BY = {Mamba2Config: {"chunk_size", "residual_in_fp32"}}
IGNORED = {"model_type", "architectures", "transformers_version", "_name_or_path", "dtype", "torch_dtype",
           "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings", "attn_mode",
           "fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp",
           "output_attentions", "output_hidden_states", "return_dict", "use_gk", "use_gv"}
DTYPES = typing.get_args(DType)

# model_type -> (config class, whether it carries CCQ, fla / reference architecture)
MODEL_TYPES = {
    "gla": (GLAConfig, False, "GLAForCausalLM"),
    "gated_deltanet": (GatedDeltaNetConfig, False, "GatedDeltaNetForCausalLM"),
    "ccq_gla": (GLAConfig, True, "CCQGLAForCausalLM"),
    "ccq_gated_deltanet": (GatedDeltaNetConfig, True, "CCQGatedDeltaNetForCausalLM"),
    "mamba2": (Mamba2Config, False, "Mamba2ForCausalLM"),
    "ccq_mamba2": (Mamba2Config, True, "CCQMamba2ForCausalLM"),
    "kda": (KDAConfig, False, "KDAForCausalLM"),
}
SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}  # transformers' tags
FLA_GLA_GATE = {"gate_low_rank_dim": 16, "gate_logit_normalizer": 16.0}  # fixed in fla's GLA layer


def _required(cls) -> dict:
    common = {name: allowed for name, allowed in REQUIRED["common"].items() if name not in MAPPED[cls]}
    return {**common, **REQUIRED[cls]}


def _decode_floats(value):
    """transformers' `{"__float__": "Infinity"}` (its JSON form of inf / -inf / nan) as the float, at any depth."""
    if isinstance(value, Mapping) and set(value) == {"__float__"} and str(value["__float__"]) in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[value["__float__"]]
    if isinstance(value, Mapping):
        return {key: _decode_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_floats(item) for item in value]
    return value


def _hint(name: str, known, model_type: str) -> str:
    if name == "ccq" and f"ccq_{model_type}" in MODEL_TYPES:
        return f" (a CCQ model has model_type 'ccq_{model_type}')"
    if name == "ccq":
        return f" (the fla format has no CCQ {model_type} model; ccq-jax's own does: CausalLM.save_pretrained)"
    return configlib.suggestion(name, known)


def config_from_fla(fla_config: Mapping[str, Any], **overrides) -> ModelConfig:
    """Our config for an fla config dict; `overrides` then replace fields (e.g. dtype, kernel.chunk_size)."""
    fla_config = _decode_floats(dict(fla_config))
    model_type = fla_config.get("model_type")
    configlib.check_choice("model_type", model_type, MODEL_TYPES)
    cls, has_ccq, _ = MODEL_TYPES[model_type]
    mapped, required = MAPPED[cls], _required(cls)
    derived = DERIVED.get(cls, ())
    known = set(mapped) | set(required) | set(derived) | IGNORED | IGNORED_BY.get(cls, set()) | (
        {"ccq"} if has_ccq else set())
    unknown = sorted(set(fla_config) - known)
    if unknown:
        hints = "; ".join(f"{name!r}{_hint(name, known, model_type)}" for name in unknown)
        raise ValueError(f"config.json: fields unknown to the {model_type} converter (they may change the math): "
                         f"{hints}")
    for name, allowed in required.items():
        if name in fla_config and fla_config[name] not in allowed:
            raise ValueError(f"config.json: {name} = {fla_config[name]!r} is not supported; ccq-jax computes "
                             f"{name} in {allowed}")
    values = {name: fla_config[name] for name in mapped if name in fla_config}
    _check_fla_attn(values.get("attn"))
    if values.get("hidden_ratio", 4) is None:
        values["hidden_ratio"] = 4
    dtype = fla_config.get("dtype", fla_config.get("torch_dtype")) or "float32"
    configlib.check_choice("dtype", dtype, DTYPES)
    values.update(dtype=dtype, param_dtype=dtype)
    if has_ccq:
        values["ccq"] = configlib.from_dict(CCQConfig, fla_config.get("ccq") or {}, prefix="ccq.")
    cfg = configlib.from_dict(cls, values)
    for name in derived:
        if fla_config.get(name) not in (None, getattr(_written(cfg), name)):
            raise ValueError(f"config.json: {name} = {fla_config[name]!r} does not match the other sizes, which give "
                             f"{getattr(_written(cfg), name)}")
    return apply_overrides(cfg, overrides) if overrides else cfg


def _check_fla_attn(attn) -> None:
    """fla's `attn` entry holds only the keys fla's Attention reads (an unknown one may change the math)."""
    if attn is None:
        return
    if not isinstance(attn, (Mapping, list)):
        raise ValueError(f"config.json: attn: expected null, a dict or a list of dicts, got {attn!r}")
    for i, spec in enumerate([attn] if isinstance(attn, Mapping) else attn):
        where = "attn" if isinstance(attn, Mapping) else f"attn[{i}]"
        if not isinstance(spec, Mapping):
            raise ValueError(f"config.json: {where}: expected a dict, got {spec!r}")
        unknown = sorted(set(spec) - set(FLA_ATTN))
        if unknown:
            raise ValueError(f"config.json: {where}: keys unknown to the converter (they may change the math): "
                             f"{unknown}; fla's Attention takes {list(FLA_ATTN)}")


def _attn_to_fla(attn):
    """fla's `attn` entry (a dict for one entry, else a list) of our HybridAttention tuple."""
    if attn is None:
        return None
    for i, spec in enumerate(attn):
        for name, fla_value in OWN_ATTN.items():
            if getattr(spec, name) != fla_value:
                raise ValueError(f"config: attn[{i}].{name} = {getattr(spec, name)!r} cannot be saved in fla's "
                                 f"format: fla's Attention has no {name} (it computes {name} = {fla_value!r}); "
                                 f"save the model in ccq-jax's own (CausalLM.save_pretrained)")
    entries = [{name: value for name, value in configlib.to_dict(spec).items() if name in FLA_ATTN} for spec in attn]
    return entries[0] if len(entries) == 1 else entries


def _written(cfg):
    """The derived fields' values as fla writes them (Mamba2's num_heads)."""
    if isinstance(cfg, Mamba2Config):
        return mamba2_dims(cfg.hidden_size, cfg.head_dim, cfg.state_size, cfg.expand, cfg.n_groups)
    return cfg


def _model_type(config: ModelConfig) -> str:
    for name, (cls, has_ccq, _) in MODEL_TYPES.items():
        if type(config) is cls and has_ccq == (config.ccq is not None):
            return name
    with_ccq = " with CCQ" if getattr(config, "ccq", None) is not None else ""
    raise ValueError(f"config: fla has no model for {type(config).__name__}{with_ccq}; expected a GLAConfig, "
                     f"GatedDeltaNetConfig or Mamba2Config (with or without CCQ) or a KDAConfig without CCQ")


def config_to_fla(config: ModelConfig) -> dict:
    """The config.json fla (or the CCQ reference, for models with a CCQ config) builds the same model from."""
    kind = _model_type(config)
    cls, has_ccq, architecture = MODEL_TYPES[kind]
    if "attn" not in MAPPED[cls] and config.attn is not None:
        raise ValueError(f"config: attn: fla's {kind} has no hybrid form (softmax attention on layers "
                         f"{sorted(i for spec in config.attn for i in spec.layers)}); save it in ccq-jax's own "
                         f"format (CausalLM.save_pretrained)")
    if cls is GLAConfig:
        for name, value in FLA_GLA_GATE.items():
            if getattr(config, name) != value:
                raise ValueError(f"config: {name} = {getattr(config, name)} cannot be saved: fla's GLA layer fixes "
                                 f"it at {value}")
    out = {"model_type": kind, "architectures": [architecture]}
    out.update({name: getattr(config, name) for name in MAPPED[cls]})
    if "attn" in out:
        out["attn"] = _attn_to_fla(config.attn)
    out.update({name: allowed[0] for name, allowed in _required(cls).items()})
    out.update({name: getattr(_written(config), name) for name in DERIVED.get(cls, ())})
    out["dtype"] = config.param_dtype
    if has_ccq:
        out["ccq"] = configlib.to_dict(config.ccq)
    return out
