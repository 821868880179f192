"""Model configs: frozen, self-validating dataclasses, one per family, with fla's field names and defaults.

`TransformerConfig`, `GLAConfig`, `GatedDeltaNetConfig` and `Mamba2Config` default to fla's default (1.3B)
`TransformerConfig` / `GLAConfig` / `GatedDeltaNetConfig` / `Mamba2Config`. Types are checked by
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
field). `layer_mixers(cfg)` gives each layer's entry (None: the family's own mixer).
"""

import dataclasses
import math
from typing import Any, ClassVar, Literal, Mapping

import jax.numpy as jnp

from ccq_jax import configlib
from ccq_jax import checks as check
from ccq_jax.layers.attention import attention_head_dim
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.gated_deltanet import gdn_dims
from ccq_jax.layers.gla import gla_dims
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.mamba2 import mamba2_dims
from ccq_jax.layers.mlp import mlp_width
from ccq_jax.ops import REFERENCES

DType = Literal["float32", "bfloat16", "float16"]
DEFAULT_KERNEL = KernelPolicy()
LINEAR_READS = ("impl", "decode_impl", "chunk_size")  # the kernel policy's fields only linear attention uses
# the flat kernel fields of configs saved before the kernel policy: {old key: its key now}; only saved configs
# (`config_from_dict`, `saved_overrides`) are read with them, overrides with an old key are refused naming the new
RENAMED = {"attn_impl": "kernel.impl", "decode_impl": "kernel.decode_impl", "chunk_size": "kernel.chunk_size",
           "head_impl": "kernel.head_impl", "interpret": "kernel.interpret"}
RENAMED_TRANSFORMER = {**RENAMED, "attn_impl": "sdpa_impl"}


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
    # traced and compiled, not num_hidden_layers); the parameters keep their per-layer layout (`layers.{i}`). A
    # hybrid scans groups of its pattern's period (attention every 4th layer: 4 blocks traced), layers outside the
    # repeats called one by one or as runs of identical blocks (`ccq_jax.models.causal_lm.scan_plan`)
    scan_layers: bool = False
    # the kernels: the linear-attention reads' `ccq_jax.ops` impls, their chunk, the decode step's LM head and the
    # kernels' interpretation (`ccq_jax.layers.KernelPolicy`); override one as `kernel.impl=pallas`
    kernel: KernelPolicy = dataclasses.field(default_factory=KernelPolicy)

    @property
    def recompute_elementwise(self) -> bool:
        """Whether the layers recompute their elementwise pieces (`ccq_jax.layers.remat`)."""
        return self.remat_policy != "none"

    def __post_init__(self):
        configlib.check_field_types(self)
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "hidden_ratio"):
            check.integer(name, getattr(self, name), minimum=1)
        # None only where the family's annotation allows it (field types are checked above): Mamba2 derives it
        check.integer("num_heads", self.num_heads, minimum=1, optional=True)
        check.integer("intermediate_size", self.intermediate_size, minimum=1, optional=True)
        check.real("norm_eps", self.norm_eps, lo=0, lo_open=True)
        check.real("initializer_range", self.initializer_range, lo=0)
        if self.kernel.head_impl == "pallas" and (self.vocab_size % 16 or self.hidden_size % 16):
            raise ValueError(f"kernel.head_impl: 'pallas' needs vocab_size and hidden_size multiples of 16, got "
                             f"{self.vocab_size} and {self.hidden_size}")

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
        """Plain values (the CCQ config and the kernel policy as dicts) plus the `family` key; `config_from_dict`
        inverts it."""
        return {"family": self.family, **configlib.to_dict(self)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig(ModelConfig):
    """Softmax attention with RoPE; sdpa_impl picks `jax.nn.dot_product_attention`'s implementation (None: JAX's
    choice). Of the kernel policy only head_impl and interpret apply (a decode step's LM head)."""

    family: ClassVar[str] = "transformer"

    num_heads: int = 32
    num_kv_heads: int | None = None
    rope_theta: float = 10000.0
    sdpa_impl: Literal["xla", "cudnn", "splash"] | None = None

    def __post_init__(self):
        super().__post_init__()
        for name in LINEAR_READS:
            if getattr(self.kernel, name) != getattr(DEFAULT_KERNEL, name):
                raise ValueError(f"kernel.{name}: the Transformer has no linear-attention reads (its attention "
                                 f"backend is sdpa_impl); leave kernel.{name} at {getattr(DEFAULT_KERNEL, name)!r}, "
                                 f"got {getattr(self.kernel, name)!r}")
        attention_head_dim(self.hidden_size, self.num_heads, self.num_kv_heads)
        check.real("rope_theta", self.rope_theta, lo=0, lo_open=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HybridAttention:
    """One entry of a linear model's `attn`: softmax attention on `layers` (fla's keys: layers, num_heads,
    num_kv_heads (None: num_heads), qkv_bias, window_size (None: full attention), rope_theta; and ccq-jax's own:
    rotary_dim (None: the whole head; 0: no RoPE) and output_gate (a sigmoid gate `g_proj`), see
    `ccq_jax.layers.Attention`). The sizes are checked against the model's in `LinearAttentionConfig`."""

    layers: tuple[int, ...] = ()
    num_heads: int = 0
    num_kv_heads: int | None = None
    qkv_bias: bool = False
    window_size: int | None = None
    rope_theta: float = 10000.0
    rotary_dim: int | None = None
    output_gate: bool = False

    def __post_init__(self):
        configlib.check_field_types(self, prefix="attn.")
        if not self.layers:
            raise ValueError("attn.layers: required: the indices of the layers that use softmax attention")
        check.integer("attn.num_heads", self.num_heads, minimum=1)
        check.integer("attn.window_size", self.window_size, minimum=1, optional=True)
        check.real("attn.rope_theta", self.rope_theta, lo=0, lo_open=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearAttentionConfig(ModelConfig):
    """Fields the linear-attention families share: CCQ, kernels (`ccq_jax.ops` impls), short convolutions, the
    hybrid attention layers (`attn`, with `sdpa_impl` their attention backend as a Transformer's)."""

    ccq: CCQConfig | None = None
    use_short_conv: bool = False
    conv_size: int = 4
    attn: tuple[HybridAttention, ...] | None = None
    sdpa_impl: Literal["xla", "cudnn", "splash"] | None = None

    def __post_init__(self):
        super().__post_init__()
        check_hybrid(self.attn, self.num_hidden_layers, self.hidden_size)
        if self.ccq is not None and self.ccq.read != "first_order":
            for name in ("impl", "decode_impl"):
                if getattr(self.kernel, name) not in REFERENCES:
                    raise ValueError(f"kernel.{name}: ccq.read={self.ccq.read!r} runs on the XLA forms "
                                     f"{list(REFERENCES)}; the kernels compute the first-order read only, got "
                                     f"{getattr(self.kernel, name)!r}")
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


def check_hybrid(attn, num_hidden_layers: int, hidden_size: int) -> None:
    """A linear model's `attn` entries against its layers and width (fla's checks); ValueError naming the field."""
    if attn is None:
        return
    if not attn:
        raise ValueError("attn: expected None or at least one entry, got an empty list")
    owner = {}
    for i, spec in enumerate(attn):
        where = f"attn[{i}]." if len(attn) > 1 else "attn."
        for layer in spec.layers:
            if not 0 <= layer < num_hidden_layers:
                raise ValueError(f"{where}layers: layer {layer} is out of range; expected a value in "
                                 f"[0, num_hidden_layers={num_hidden_layers})")
            if layer in owner:
                first = "the same entry" if owner[layer] == i else f"entry {owner[layer]}"
                raise ValueError(f"{where}layers: layer {layer} is listed twice (already in {first})")
            owner[layer] = i
        attention_head_dim(hidden_size, spec.num_heads, spec.num_kv_heads, spec.rotary_dim, prefix=where)


def layer_mixers(cfg: ModelConfig) -> tuple:
    """Per layer, the `HybridAttention` entry that makes it a softmax attention layer, or None where the layer
    keeps the family's own mixer (every layer of a pure model)."""
    specs = [None] * cfg.num_hidden_layers
    for spec in (cfg.attn if isinstance(cfg, LinearAttentionConfig) else None) or ():
        for layer in spec.layers:
            specs[layer] = spec
    return tuple(specs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mamba2Config(LinearAttentionConfig):
    """fla's Mamba2Config (its field names and defaults; fla's default is a 1.3B model of 48 layers): blocks of a norm
    and the mixer alone, no MLP (hidden_ratio, intermediate_size and use_short_conv do not apply). num_heads is
    int(expand * hidden_size) / head_dim (None: derived so; a value must equal it). The SSD kernel's `chunk_size`
    is the kernel policy's (`kernel.chunk_size`); residual_in_fp32 is what ccq-jax's residual stream does anyway."""

    family: ClassVar[str] = "mamba2"

    num_hidden_layers: int = 48
    num_heads: int | None = None
    norm_eps: float = 1e-5
    head_dim: int = 64
    state_size: int = 128
    expand: int = 2
    n_groups: int = 1
    conv_kernel: int = 4
    use_bias: bool = False
    use_conv_bias: bool = True
    conv_init: float | None = None
    A_init_range: tuple[float, ...] = (1.0, 16.0)
    D_has_hdim: bool = False
    hidden_act: Literal["silu", "swish"] = "silu"
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    dt_limit: tuple[float, ...] = (0.0, math.inf)
    rescale_prenorm_residual: bool = True
    rmsnorm: bool = True
    norm_before_gate: bool = False

    def __post_init__(self):
        super().__post_init__()
        mamba2_dims(self.hidden_size, self.head_dim, self.state_size, self.expand, self.n_groups, self.num_heads)
        for name, default in (("hidden_ratio", 4), ("intermediate_size", None), ("use_short_conv", False)):
            if getattr(self, name) != default:
                raise ValueError(f"{name}: Mamba2 blocks have no MLP and one conv1d (conv_kernel wide); leave "
                                 f"{name} at {default!r}, got {getattr(self, name)!r}")
        check.real("conv_init", self.conv_init, lo=0, lo_open=True, optional=True)
        lo, hi = _pair("A_init_range", self.A_init_range)
        if not 0 < lo <= hi:
            raise ValueError(f"A_init_range: expected 0 < min <= max, got {self.A_init_range}")
        if not 0 < self.dt_min <= self.dt_max or self.dt_init_floor <= 0:
            raise ValueError(f"dt_min, dt_max, dt_init_floor: expected 0 < dt_min <= dt_max and dt_init_floor > 0, "
                             f"got {self.dt_min}, {self.dt_max}, {self.dt_init_floor}")
        lo, hi = _pair("dt_limit", self.dt_limit)
        if not 0 <= lo < hi:
            raise ValueError(f"dt_limit: expected 0 <= min < max (max may be inf), got {self.dt_limit}")

    @property
    def mixer_options(self) -> dict:
        """The keyword arguments of `ccq_jax.layers.Mamba2` this config sets."""
        names = ("head_dim", "state_size", "expand", "n_groups", "conv_kernel", "use_conv_bias", "conv_init",
                 "A_init_range", "D_has_hdim", "rmsnorm", "norm_before_gate", "dt_min", "dt_max", "dt_init_floor",
                 "dt_limit", "use_bias")
        rescale = self.num_hidden_layers if self.rescale_prenorm_residual else None
        return {**{name: getattr(self, name) for name in names}, "rescale_layers": rescale}


def _pair(name, values):
    if len(values) != 2 or any(math.isnan(v) for v in values):
        raise ValueError(f"{name}: expected two numbers (min, max), got {values!r}")
    return values


FAMILIES = {cls.family: cls for cls in (TransformerConfig, GLAConfig, GatedDeltaNetConfig, Mamba2Config)}


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
