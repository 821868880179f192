"""Model configs: frozen, self-validating dataclasses, one per family, with fla's field names and defaults.

`TransformerConfig`, `GLAConfig` and `GatedDeltaNetConfig` default to fla's default (1.3B)
`TransformerConfig` / `GLAConfig` / `GatedDeltaNetConfig`. Types are checked by
`ccq_jax.configlib`, values here; every failure is a `ValueError` naming the field. Built
from dicts or overrides (`config_from_dict`, `apply_overrides`, `get_config(name, **overrides)`)
unknown keys are rejected with the closest valid name. `dtype` is the compute dtype,
`param_dtype` the parameters' (e.g. bf16 compute on fp32 parameters); recurrent states,
gates and statistics are fp32 whatever these are.
"""

import dataclasses
from typing import Any, ClassVar, Literal, Mapping

import jax.numpy as jnp

from ccq_jax import configlib
from ccq_jax import checks as check
from ccq_jax.layers.attention import attention_head_dim
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.gated_deltanet import gdn_dims
from ccq_jax.layers.gla import gla_dims
from ccq_jax.layers.mlp import mlp_width
from ccq_jax.ops import IMPLS, REFERENCES

DType = Literal["float32", "bfloat16", "float16"]


@dataclasses.dataclass(frozen=True, kw_only=True)
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
    dtype: DType = "float32"
    param_dtype: DType = "float32"
    # what the backward pass recomputes instead of storing: "elementwise" the norms, gates, short convolutions
    # and the SwiGLU product (ccq_jax.layers.remat); "block" every block whole; "none" nothing
    remat_policy: Literal["none", "elementwise", "block"] = "elementwise"
    # run the blocks of a forward without a cache as one `lax.scan` over the layers' stacked parameters (one block
    # traced and compiled, not num_hidden_layers); the parameters keep their per-layer layout (`layers.{i}`)
    scan_layers: bool = False
    # the LM head of a decode step (one token per row, with a cache): "xla" (XLA's GEMM) or "pallas" (the
    # row-matmul kernel, `ccq_jax.ops.lm_head`: compiled on a GPU, interpreted on a CPU)
    head_impl: Literal["xla", "pallas"] = "xla"
    # the kernels' `interpret` (`ccq_jax.ops`): None interprets them exactly on a CPU; False compiles them also
    # there, for ahead-of-time compilation to another platform (`ccq-compile` for a TPU topology)
    interpret: bool | None = None

    @property
    def kernel_impls(self) -> dict:
        """{field: impl} of the fields that pick kernels or their references (`interpret` applies to these)."""
        return {"head_impl": self.head_impl}

    @property
    def runs_kernels(self) -> bool:
        """Whether any of `kernel_impls` picks a kernel (not XLA's forms: the references, "xla")."""
        return any(impl not in (*REFERENCES, "xla") for impl in self.kernel_impls.values())

    @property
    def recompute_elementwise(self) -> bool:
        """Whether the layers recompute their elementwise pieces (`ccq_jax.layers.remat`)."""
        return self.remat_policy != "none"

    def __post_init__(self):
        configlib.check_field_types(self)
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "hidden_ratio"):
            check.integer(name, getattr(self, name), minimum=1)
        check.integer("intermediate_size", self.intermediate_size, minimum=1, optional=True)
        check.real("norm_eps", self.norm_eps, lo=0, lo_open=True)
        check.real("initializer_range", self.initializer_range, lo=0)
        if self.head_impl == "pallas" and (self.vocab_size % 16 or self.hidden_size % 16):
            raise ValueError(f"head_impl: 'pallas' needs vocab_size and hidden_size multiples of 16, got "
                             f"{self.vocab_size} and {self.hidden_size}")
        if self.interpret is not None and not self.runs_kernels:
            chosen = ", ".join(f"{k}={v!r}" for k, v in self.kernel_impls.items())
            raise ValueError(f"interpret: {chosen} run no kernels; leave interpret unset (None) or pick a kernel "
                             f"impl")

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
        return {"family": self.family, **configlib.to_dict(self)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig(ModelConfig):
    """Softmax attention with RoPE; attn_impl picks `jax.nn.dot_product_attention`'s implementation."""

    family: ClassVar[str] = "transformer"

    num_heads: int = 32
    num_kv_heads: int | None = None
    rope_theta: float = 10000.0
    attn_impl: Literal["xla", "cudnn"] | None = None

    def __post_init__(self):
        super().__post_init__()
        attention_head_dim(self.hidden_size, self.num_heads, self.num_kv_heads)
        check.real("rope_theta", self.rope_theta, lo=0, lo_open=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearAttentionConfig(ModelConfig):
    """Fields the linear-attention families share: CCQ, kernels (`ccq_jax.ops` impls), short convolutions."""

    ccq: CCQConfig | None = None
    attn_impl: str = "chunk"
    decode_impl: str = "recurrent"
    chunk_size: int | None = None
    use_short_conv: bool = False
    conv_size: int = 4

    @property
    def kernel_impls(self) -> dict:
        return {"attn_impl": self.attn_impl, "decode_impl": self.decode_impl, **super().kernel_impls}

    def __post_init__(self):
        super().__post_init__()
        configlib.check_choice("attn_impl", self.attn_impl, IMPLS)
        configlib.check_choice("decode_impl", self.decode_impl, IMPLS)
        if self.ccq is not None and self.ccq.read != "first_order":
            for name in ("attn_impl", "decode_impl"):
                if getattr(self, name) not in REFERENCES:
                    raise ValueError(f"{name}: ccq.read={self.ccq.read!r} runs on the XLA forms {list(REFERENCES)}; "
                                     f"the kernels compute the first-order read only, got {getattr(self, name)!r}")
        check.integer("chunk_size", self.chunk_size, minimum=1, optional=True)
        check.integer("conv_size", self.conv_size, minimum=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
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
        check.real("clamp_min", self.clamp_min, hi=0, optional=True)
        check.integer("gate_low_rank_dim", self.gate_low_rank_dim, minimum=1)
        check.real("gate_logit_normalizer", self.gate_logit_normalizer, lo=0, lo_open=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
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


FAMILIES = {cls.family: cls for cls in (TransformerConfig, GLAConfig, GatedDeltaNetConfig)}


def config_from_dict(values: Mapping[str, Any]) -> ModelConfig:
    """Inverse of `ModelConfig.to_dict`: the `family` key picks the class."""
    values = dict(values)
    family = values.pop("family", None)
    configlib.check_choice("family", family, FAMILIES)
    return configlib.from_dict(FAMILIES[family], values)


def apply_overrides(cfg: ModelConfig, overrides: Mapping[str, Any]) -> ModelConfig:
    """`cfg` with fields replaced; dotted keys reach into the CCQ config (`{"ccq.mode": "off"}`),
    a dict for `ccq` replaces it (`{"ccq": {"mode": "fixed"}}`), `{"ccq": None}` removes it."""
    return configlib.with_overrides(cfg, overrides)
