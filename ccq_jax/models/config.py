"""Model configs: frozen, self-validating dataclasses, one per family, with fla's field names and defaults.

`TransformerConfig`, `GLAConfig` and `GatedDeltaNetConfig` default to fla's default (1.3B)
`TransformerConfig` / `GLAConfig` / `GatedDeltaNetConfig`. Every bad value raises a
`ValueError` naming the field; unknown keys are rejected with the closest valid name.
`dtype` is the compute dtype, `param_dtype` the parameters' (e.g. bf16 compute on fp32
parameters); recurrent states, gates and statistics are fp32 whatever these are.
"""

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from ccq_jax.layers import _config as check
from ccq_jax.layers._config import config, reject_unknown
from ccq_jax.layers.attention import ATTN_IMPLS, attention_head_dim
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.gated_deltanet import gdn_dims
from ccq_jax.layers.gla import gla_dims
from ccq_jax.layers.mlp import mlp_width
from ccq_jax.ops import BACKENDS

DTYPES = ("float32", "bfloat16", "float16")


@config
class ModelConfig:
    """Fields every family has (the embedding, the blocks' norms and MLPs, dtypes)."""

    family: ClassVar[str] = ""

    vocab_size: int = 32000
    hidden_size: int = 2048
    num_hidden_layers: int = 24
    num_heads: int = 4
    hidden_ratio: int = 4
    intermediate_size: int | None = None
    norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "hidden_ratio"):
            check.integer(name, getattr(self, name), minimum=1)
        check.integer("intermediate_size", self.intermediate_size, minimum=1, optional=True)
        check.real("norm_eps", self.norm_eps, lo=0, lo_open=True)
        check.real("initializer_range", self.initializer_range, lo=0)
        check.boolean("tie_word_embeddings", self.tie_word_embeddings)
        check.choice("dtype", self.dtype, DTYPES)
        check.choice("param_dtype", self.param_dtype, DTYPES)

    @property
    def mlp_width(self) -> int:
        return mlp_width(self.hidden_size, self.hidden_ratio, self.intermediate_size)

    @property
    def compute_dtype(self):
        return jnp.dtype(self.dtype)

    @property
    def params_dtype(self):
        return jnp.dtype(self.param_dtype)

    def to_dict(self) -> dict:
        """Plain values (the CCQ config as a dict) plus the `family` key; `config_from_dict` inverts it."""
        return {"family": self.family, **dataclasses.asdict(self)}


@config
class TransformerConfig(ModelConfig):
    """Softmax attention with RoPE; attn_impl picks `jax.nn.dot_product_attention`'s implementation."""

    family: ClassVar[str] = "transformer"

    num_heads: int = 32
    num_kv_heads: int | None = None
    rope_theta: float = 10000.0
    attn_impl: str | None = None

    def __post_init__(self):
        super().__post_init__()
        attention_head_dim(self.hidden_size, self.num_heads, self.num_kv_heads)
        check.real("rope_theta", self.rope_theta, lo=0, lo_open=True)
        check.choice("attn_impl", self.attn_impl, ATTN_IMPLS)


@config
class LinearAttentionConfig(ModelConfig):
    """Fields the linear-attention families share: CCQ, kernels, short convolutions."""

    ccq: CCQConfig | None = None
    attn_impl: str = "chunk"
    decode_impl: str = "recurrent"
    chunk_size: int | None = None
    use_short_conv: bool = False
    conv_size: int = 4

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.ccq, dict):
            object.__setattr__(self, "ccq", CCQConfig(**self.ccq))
        if self.ccq is not None and not isinstance(self.ccq, CCQConfig):
            raise ValueError(f"ccq: expected a CCQConfig, a dict of its fields or None, got {self.ccq!r}")
        check.choice("attn_impl", self.attn_impl, tuple(BACKENDS))
        check.choice("decode_impl", self.decode_impl, tuple(BACKENDS))
        check.integer("chunk_size", self.chunk_size, minimum=1, optional=True)
        check.boolean("use_short_conv", self.use_short_conv)
        check.integer("conv_size", self.conv_size, minimum=1)


@config
class GLAConfig(LinearAttentionConfig):
    """fla's GLAConfig (gate_low_rank_dim / gate_logit_normalizer are fla's layer defaults, 16 and 16)."""

    family: ClassVar[str] = "gla"

    expand_k: float = 0.5
    expand_v: float = 1.0
    num_kv_heads: int | None = None
    use_output_gate: bool = True
    clamp_min: float | None = None
    gate_low_rank_dim: int = 16
    gate_logit_normalizer: float = 16.0

    def __post_init__(self):
        super().__post_init__()
        gla_dims(self.hidden_size, self.num_heads, self.num_kv_heads, self.expand_k, self.expand_v)
        check.boolean("use_output_gate", self.use_output_gate)
        check.real("clamp_min", self.clamp_min, hi=0, optional=True)
        check.integer("gate_low_rank_dim", self.gate_low_rank_dim, minimum=1)
        check.real("gate_logit_normalizer", self.gate_logit_normalizer, lo=0, lo_open=True)


@config
class GatedDeltaNetConfig(LinearAttentionConfig):
    """fla's GatedDeltaNetConfig."""

    family: ClassVar[str] = "gdn"

    num_hidden_layers: int = 21
    num_heads: int = 6
    head_dim: int = 256
    expand_v: float = 2.0
    num_v_heads: int | None = None
    use_gate: bool = True
    use_short_conv: bool = True
    allow_neg_eigval: bool = False

    def __post_init__(self):
        super().__post_init__()
        gdn_dims(self.num_heads, self.head_dim, self.expand_v, self.num_v_heads)
        check.boolean("use_gate", self.use_gate)
        check.boolean("allow_neg_eigval", self.allow_neg_eigval)


FAMILIES = {cls.family: cls for cls in (TransformerConfig, GLAConfig, GatedDeltaNetConfig)}


def config_from_dict(values: dict) -> ModelConfig:
    """Inverse of `ModelConfig.to_dict`: the `family` key picks the class."""
    values = dict(values)
    family = values.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {sorted(FAMILIES)}, got {family!r}")
    return FAMILIES[family](**values)


def apply_overrides(cfg: ModelConfig, overrides: dict) -> ModelConfig:
    """`cfg` with fields replaced; a dict for `ccq` updates the current CCQ config (or the default one)."""
    reject_unknown(type(cfg).__name__, overrides, {f.name for f in dataclasses.fields(cfg)})
    overrides = dict(overrides)
    if isinstance(overrides.get("ccq"), dict):
        base = getattr(cfg, "ccq", None) or CCQConfig()
        overrides["ccq"] = base.replace(**overrides["ccq"])
    return cfg.replace(**overrides)
