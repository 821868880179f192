"""The model families' configs, fla's field names and defaults (see `ccq_jax.models.config`): softmax attention
(`TransformerConfig`), GLA, Gated DeltaNet, Mamba2, and the channel-decay delta rules KDA and Gated DeltaNet-2."""

import dataclasses
import math
from typing import ClassVar, Literal

from ccq_jax import checks as check
from ccq_jax.layers.attention import attention_head_dim
from ccq_jax.layers.gated_deltanet import gdn_dims
from ccq_jax.layers.gla import gla_dims
from ccq_jax.layers.kda import check_kda_gate
from ccq_jax.layers.mamba2 import mamba2_dims
from ccq_jax.models.config_base import DEFAULT_KERNEL, LINEAR_READS, LinearAttentionConfig, ModelConfig


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
        self.kernel.check_interpret(splash=self.sdpa_impl == "splash")


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelDecayConfig(LinearAttentionConfig):
    """What KDA and Gated DeltaNet-2 share (fla's layer defaults: 16 heads of 128, expand_v 1, short convs). Their
    layers read through the generalized delta rule: kernel.impl="pallas" runs its state-pass kernels (Triton on a
    GPU, Mosaic TPU on a TPU)."""

    num_heads: int = 16
    head_dim: int = 128
    expand_v: float = 1.0
    num_v_heads: int | None = None
    use_short_conv: bool = True
    allow_neg_eigval: bool = False

    def __post_init__(self):
        super().__post_init__()
        gdn_dims(self.num_heads, self.head_dim, self.expand_v, self.num_v_heads)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KDAConfig(ChannelDecayConfig):
    """fla's KDAConfig (Kimi Delta Attention): safe_gate / lower_bound pick fla's bounded gate."""

    family: ClassVar[str] = "kda"

    safe_gate: bool = False
    lower_bound: float | None = None

    def __post_init__(self):
        super().__post_init__()
        check_kda_gate(self.safe_gate, self.lower_bound)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedDeltaNet2Config(ChannelDecayConfig):
    """Gated DeltaNet-2: fla's `GatedDeltaNet2` layer in KDA's model (fla has no GDN-2 model class)."""

    family: ClassVar[str] = "gdn2"
