"""Model configs: frozen, self-validating dataclasses, one per family, with fla's field names and defaults.

`TransformerConfig`, `GLAConfig`, `GatedDeltaNetConfig`, `Mamba2Config` and `KDAConfig` default to fla's default
(1.3B) `TransformerConfig` / `GLAConfig` / `GatedDeltaNetConfig` / `Mamba2Config` / `KDAConfig`;
`GatedDeltaNet2Config` (fla has a GDN-2 layer but no model) to KDA's model with fla's GDN-2 layer defaults. The
fields every family shares live in `ccq_jax.models.config_base`, the families in `ccq_jax.models.config_families`;
this module gathers them (`FAMILIES`) and reads them from dicts and overrides. Types are checked by
`ccq_jax.configlib`, values here; every failure is a `ValueError` naming the field. Built
from dicts or overrides (`config_from_dict`, `apply_overrides`, `get_config(name, **overrides)`)
unknown keys are rejected with the closest valid name. `dtype` is the compute dtype,
`param_dtype` the parameters' (e.g. bf16 compute on fp32 parameters); recurrent states,
gates and statistics are fp32 whatever these are. `kernel` (a `KernelPolicy`) picks the kernels
(`kernel.impl=pallas`); a Transformer's attention backend is its own `sdpa_impl`. Configs saved before the
policy (flat `attn_impl`, `decode_impl`, `chunk_size`, `head_impl`, `interpret`) still load; as overrides those
keys are refused, naming their new key.

Hybrids: every linear family takes fla's `attn` entry (one `HybridAttention` or a tuple of them; from a dict, a
dict or a list of dicts): the layers it lists use softmax attention (`ccq_jax.layers.Attention`) with its
options, the others keep the family's mixer (and its CCQ read). Checked as fla's `normalize_hybrid_attention_config`
checks it (a layer listed twice or out of range, heads that do not divide, unknown keys: a ValueError naming the
field). Or per layer, as Qwen3-Next's `layer_types` ("linear_attention" / "full_attention" / "sliding_attention"
for each layer; `config_base.attn_of_layer_types`): alone it gives the full-attention layers one entry with the
model's heads, beside `attn` it must agree with it. `layer_mixers(cfg)` gives each layer's entry (None: the
family's own mixer).
"""

from typing import Any, Mapping

from ccq_jax import configlib
from ccq_jax.models.config_base import (
    DEFAULT_KERNEL, LINEAR_READS, DType, HybridAttention, LinearAttentionConfig, ModelConfig, check_hybrid,
    layer_mixers,
)
from ccq_jax.models.config_families import (
    ChannelDecayConfig, GatedDeltaNet2Config, GatedDeltaNetConfig, GLAConfig, KDAConfig, Mamba2Config,
    TransformerConfig,
)

__all__ = ["DEFAULT_KERNEL", "FAMILIES", "LINEAR_READS", "RENAMED", "RENAMED_TRANSFORMER", "ChannelDecayConfig", "DType",
           "GLAConfig", "GatedDeltaNet2Config", "GatedDeltaNetConfig", "HybridAttention", "KDAConfig",
           "LinearAttentionConfig", "Mamba2Config", "ModelConfig", "TransformerConfig", "apply_overrides",
           "check_hybrid", "config_from_dict", "layer_mixers", "renamed_keys", "saved_overrides"]

# the flat kernel fields of configs saved before the kernel policy: {old key: its key now}; only saved configs
# (`config_from_dict`, `saved_overrides`) are read with them, overrides with an old key are refused naming the new
RENAMED = {"attn_impl": "kernel.impl", "decode_impl": "kernel.decode_impl", "chunk_size": "kernel.chunk_size",
           "head_impl": "kernel.head_impl", "interpret": "kernel.interpret"}
RENAMED_TRANSFORMER = {**RENAMED, "attn_impl": "sdpa_impl"}


FAMILIES = {cls.family: cls for cls in (TransformerConfig, GLAConfig, GatedDeltaNetConfig, Mamba2Config, KDAConfig,
                                         GatedDeltaNet2Config)}


def renamed_keys(family: str) -> dict[str, str]:
    """{old flat key: its key now} of `family`'s configs (a Transformer's `attn_impl` is its `sdpa_impl`)."""
    configlib.check_choice("family", family, FAMILIES)
    return RENAMED_TRANSFORMER if family == "transformer" else RENAMED


def saved_overrides(family: str, overrides: Mapping[str, Any]) -> dict:
    """Overrides stored with a saved model or run (a run's `model_overrides`) with the old flat kernel keys renamed
    (`{"attn_impl": "pallas"}` -> `{"kernel.impl": "pallas"}`), for `apply_overrides` / `get_config`."""
    names = renamed_keys(family)
    return {names.get(key, key): value for key, value in overrides.items()}


def config_from_dict(values: Mapping[str, Any]) -> ModelConfig:
    """Inverse of `ModelConfig.to_dict`: the `family` key picks the class. A config saved before the kernel policy
    (flat `attn_impl`, `decode_impl`, `chunk_size`, `head_impl`, `interpret`) reads as the same config."""
    values = dict(values)
    family = values.pop("family", None)
    old = {key: values.pop(key) for key in renamed_keys(family) if key in values}
    cfg = configlib.from_dict(FAMILIES[family], values)
    return configlib.with_overrides(cfg, saved_overrides(family, old)) if old else cfg


def apply_overrides(cfg: ModelConfig, overrides: Mapping[str, Any]) -> ModelConfig:
    """`cfg` with fields replaced; dotted keys reach into the CCQ config and the kernel policy
    (`{"ccq.mode": "off"}`, `{"kernel.impl": "pallas"}`), a dict for `ccq` replaces it (`{"ccq": {"mode": "fixed"}}`),
    `{"ccq": None}` removes it. The old flat kernel keys (`attn_impl`, ...) are refused, naming their new key."""
    names = renamed_keys(cfg.family)
    for key in overrides:
        if key in names:
            raise ValueError(f"{key}: renamed to {names[key]} (e.g. {names[key]}={overrides[key]!r})")
    return configlib.with_overrides(cfg, overrides)
