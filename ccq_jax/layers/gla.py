"""fla's `GatedLinearAttention` layer as a Flax NNX module, optionally with the CCQ read.

    q, k, v = q_proj(x), k_proj(x), v_proj(x)              (+ SiLU short convs if use_short_conv)
    g       = logsigmoid(gk_proj(x)) / gate_logit_normalizer  (low-rank: D -> 16 -> key_dim; clamp_min)
    o       = ops.gla(q, k, v, g)  or  ops.ccq_gla(q, k, v, g, lam)
    y       = o_proj(g_norm_swish_gate(o, g_proj(x)))       (g_norm(o) without the output gate)

Parameter paths match fla's state_dict names (`q_proj`, `k_proj`, `v_proj`, `g_proj`,
`gk_proj.0`, `gk_proj.1` (with bias), `g_norm_swish_gate` / `g_norm`, `o_proj`,
`{q,k,v}_conv1d`), plus `ccq.weight`, `ccq.bias` when CCQ is configured. With
`num_kv_heads < num_heads` keys, values and gates are shared by groups of heads (fla's MQA).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax import checks as check
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.norm import GatedRMSNorm, RMSNorm
from ccq_jax.layers.params import linear
from ccq_jax.layers.recurrent import RecurrentMixer
from ccq_jax.layers.remat import maybe_recomputed
from ccq_jax.layers.shapes import split_heads


class GLADims(NamedTuple):
    key_dim: int
    value_dim: int
    head_k_dim: int
    head_v_dim: int
    num_kv_heads: int


def gla_dims(hidden_size, num_heads, num_kv_heads=None, expand_k=0.5, expand_v=1.0) -> GLADims:
    """Validate GLA's sizes (ValueError naming the field) and derive fla's dimensions."""
    check.integer("hidden_size", hidden_size, minimum=1)
    check.integer("num_heads", num_heads, minimum=1)
    check.integer("num_kv_heads", num_kv_heads, minimum=1, optional=True)
    check.real("expand_k", expand_k, lo=0, lo_open=True)
    check.real("expand_v", expand_v, lo=0, lo_open=True)
    key_dim, value_dim = int(hidden_size * expand_k), int(hidden_size * expand_v)
    for name, dim in (("expand_k", key_dim), ("expand_v", value_dim)):
        if dim < num_heads or dim % num_heads:
            raise ValueError(f"{name}: int(hidden_size * {name}) = {dim} must be a positive multiple of "
                             f"num_heads = {num_heads}")
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads % kv_heads:
        raise ValueError(f"num_kv_heads: must divide num_heads = {num_heads}, got {kv_heads}")
    return GLADims(key_dim, value_dim, key_dim // num_heads, value_dim // num_heads, kv_heads)


class GatedLinearAttention(RecurrentMixer):
    def __init__(self, hidden_size: int, *, num_heads: int = 4, num_kv_heads: int | None = None,
                 expand_k: float = 0.5, expand_v: float = 1.0, use_short_conv: bool = False, conv_size: int = 4,
                 use_output_gate: bool = True, norm_eps: float = 1e-5, gate_low_rank_dim: int = 16,
                 gate_logit_normalizer: float = 16, clamp_min: float | None = None, ccq: CCQConfig | None = None,
                 kernel: KernelPolicy = KernelPolicy(), initializer_range: float = 0.02, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True, rngs: nnx.Rngs):
        d = gla_dims(hidden_size, num_heads, num_kv_heads, expand_k, expand_v)
        self.num_heads, self.dims = num_heads, d
        self.gate_logit_normalizer, self.clamp_min = gate_logit_normalizer, clamp_min
        groups = num_heads // d.num_kv_heads
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.q_proj = linear(hidden_size, d.key_dim, ("embed", "heads"), **kw)
        self.k_proj = linear(hidden_size, d.key_dim // groups, ("embed", "heads"), **kw)
        self.v_proj = linear(hidden_size, d.value_dim // groups, ("embed", "heads"), **kw)
        self.use_output_gate = use_output_gate
        if use_output_gate:
            self.g_proj = linear(hidden_size, d.value_dim, ("embed", "heads"), **kw)
        self.gk_proj = nnx.List([
            linear(hidden_size, gate_low_rank_dim, ("embed", None), **kw),
            linear(gate_low_rank_dim, d.key_dim // groups, (None, "heads"), use_bias=True, **kw),
        ])
        self.o_proj = linear(d.value_dim, hidden_size, ("heads", "embed"), **kw)
        norm_kw = dict(eps=norm_eps, dtype=dtype, param_dtype=param_dtype, axis="kv", recompute=recompute)
        if use_output_gate:
            self.g_norm_swish_gate = GatedRMSNorm(d.head_v_dim, **norm_kw)
        else:
            self.g_norm = RMSNorm(d.head_v_dim, **norm_kw)
        conv = (d.key_dim, d.key_dim // groups, d.value_dim // groups) if use_short_conv else None
        self._setup(state_heads=num_heads, head_k_dim=d.head_k_dim, head_v_dim=d.head_v_dim, conv_channels=conv,
                    conv_size=conv_size, ccq=ccq, kernel=kernel, recompute=recompute, **kw)

    def _expand(self, x, head_dim):
        """[B, T, Hkv*D] -> [B, T, H, D], each kv head serving num_heads / num_kv_heads query heads."""
        return jnp.repeat(split_heads(x, head_dim), self.num_heads // self.dims.num_kv_heads, axis=2)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache=None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        q, k, v, conv = self._project(x, segment_ids, cache, silu_without_conv=False)
        gk = self.gk_proj[1](self.gk_proj[0](x))
        dk, dv = self.dims.head_k_dim, self.dims.head_v_dim
        q, k, v, gk = split_heads(q, dk), self._expand(k, dk), self._expand(v, dv), self._expand(gk, dk)
        gk = maybe_recomputed(_log_gates, self.recompute)(gk, self.gate_logit_normalizer, self.clamp_min)
        o, state, stats = self._read((ops.gla, ops.ccq_gla), q, k, (v, gk), segment_ids=segment_ids, cache=cache)
        norm = self.g_norm_swish_gate if self.use_output_gate else self.g_norm
        return self._output(o, x, norm, self.use_output_gate), self._new_cache(cache, state, stats, conv)


@functools.partial(jax.checkpoint, static_argnums=(1, 2))
def _log_gates(gk, normalizer, clamp_min):
    """log_sigmoid(gk) / normalizer, clamped below at clamp_min (None: not clamped), fp32; recomputed in the
    backward pass from gk (autodiff would keep fp32 intermediates)."""
    gk = jax.nn.log_sigmoid(gk.astype(jnp.float32)) / normalizer
    return gk if clamp_min is None else jnp.maximum(gk, clamp_min)
