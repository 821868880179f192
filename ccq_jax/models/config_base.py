"""The fields every model family shares (`ModelConfig`) and the linear families' (`LinearAttentionConfig`, with
fla's hybrid `attn` entries, `HybridAttention`). The families are in `ccq_jax.models.config_families`, gathered
with the dict and override readers in `ccq_jax.models.config`."""

import dataclasses
from typing import ClassVar, Literal

import jax.numpy as jnp

from ccq_jax import configlib
from ccq_jax import checks as check
from ccq_jax.layers.attention import attention_head_dim
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.mlp import mlp_width
from ccq_jax.ops import REFERENCES

DType = Literal["float32", "bfloat16", "float16"]
LayerType = Literal["linear_attention", "full_attention", "sliding_attention"]
DEFAULT_KERNEL = KernelPolicy()
LINEAR_READS = ("impl", "decode_impl", "chunk_size")  # the kernel policy's fields only linear attention uses


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
    # what the backward pass recomputes instead of storing (ccq_jax.layers.remat): "elementwise" the norms, gates,
    # short convolutions and the SwiGLU product; "dots" all but the matmuls' outputs and the kernels' residuals in
    # each linear-attention block; "block" every block whole; "none" nothing
    remat_policy: Literal["none", "elementwise", "dots", "block"] = "elementwise"
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
    hybrid attention layers (`attn`, with `sdpa_impl` their attention backend as a Transformer's, or the per-layer
    list `layer_types`, see `attn_of_layer_types`)."""

    ccq: CCQConfig | None = None
    use_short_conv: bool = False
    conv_size: int = 4
    attn: tuple[HybridAttention, ...] | None = None
    layer_types: tuple[LayerType, ...] | None = None
    sdpa_impl: Literal["xla", "cudnn", "splash"] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.layer_types is not None:
            object.__setattr__(self, "attn", attn_of_layer_types(self.layer_types, self.attn, self.num_hidden_layers,
                                                                 self.hidden_size, self.num_heads))
        check_hybrid(self.attn, self.num_hidden_layers, self.hidden_size)
        self.kernel.check_interpret(splash=self.sdpa_impl == "splash")
        if self.ccq is not None and self.ccq.read != "first_order":
            for name in ("impl", "decode_impl"):
                if getattr(self.kernel, name) not in REFERENCES:
                    raise ValueError(f"kernel.{name}: ccq.read={self.ccq.read!r} runs on the XLA forms "
                                     f"{list(REFERENCES)}; the kernels compute the first-order read only, got "
                                     f"{getattr(self.kernel, name)!r}")
        check.integer("conv_size", self.conv_size, minimum=1)


def attn_of_layer_types(layer_types, attn, num_hidden_layers: int, hidden_size: int, num_heads: int):
    """The `attn` entries of a per-layer list in the style of Qwen3-Next's `layer_types` (one of "linear_attention":
    the family's mixer, "full_attention", "sliding_attention" per layer). Beside `attn` the list is checked against
    it (each layer's kind as the entries make it: listed with a `window_size`, sliding; listed without, full) and
    `attn` is returned; without `attn`, the full-attention layers get one entry with the model's `num_heads` and
    fla's other defaults, and sliding layers are refused (their window has no default). ValueError naming the field."""
    if len(layer_types) != num_hidden_layers:
        raise ValueError(f"layer_types: expected one entry per layer (num_hidden_layers={num_hidden_layers}), got "
                         f"{len(layer_types)}")
    if attn is None:
        sliding = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
        if sliding:
            raise ValueError(f"layer_types: layers {sliding} are 'sliding_attention', whose window comes from an attn "
                             f"entry (attn.window_size); got no attn")
        full = tuple(i for i, kind in enumerate(layer_types) if kind == "full_attention")
        if not full:
            return None
        if num_heads is None:
            raise ValueError(f"layer_types: layers {list(full)} are 'full_attention', and this model has no num_heads "
                             f"of its own to give them (Mamba2 derives its heads); give an attn entry with num_heads")
        attention_head_dim(hidden_size, num_heads, None, None,
                           prefix="layer_types (full attention with the model's num_heads, attn not given): ")
        return (HybridAttention(layers=full, num_heads=num_heads),)
    kinds = ["linear_attention"] * num_hidden_layers
    for spec in attn:
        for layer in spec.layers:
            if 0 <= layer < num_hidden_layers:  # out of range: check_hybrid names it
                kinds[layer] = "full_attention" if spec.window_size is None else "sliding_attention"
    for i, (want, got) in enumerate(zip(layer_types, kinds)):
        if want != got:
            raise ValueError(f"layer_types[{i}]: {want!r}, but attn makes layer {i} {got!r} (an attn entry that lists "
                             f"a layer with window_size makes it sliding, without it full)")
    return attn


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
