"""fla's `GatedDeltaNet` layer as a Flax NNX module, optionally with the CCQ read.

    q, k, v = silu(conv(q_proj(x))), silu(conv(k_proj(x))), silu(conv(v_proj(x)))   (SiLU alone without convs)
    q, k    = l2norm(q), l2norm(k)
    g       = -exp(A_log) * softplus(a_proj(x) + dt_bias)       (log decay per head)
    beta    = sigmoid(b_proj(x))                                 (x2 if allow_neg_eigval)
    o       = ops.gated_delta_rule(q, k, v, g, beta)  or  ops.ccq_gated_delta_rule(..., lam)
    y       = o_proj(o_norm(o, g_proj(x)))                       (o_norm(o) without the output gate)

Parameter paths match fla's state_dict names (`q_proj`, `k_proj`, `v_proj`, `a_proj`,
`b_proj`, `A_log`, `dt_bias`, `{q,k,v}_conv1d`, `g_proj`, `o_norm`, `o_proj`), plus
`ccq.weight`, `ccq.bias`. With `num_v_heads > num_heads` (fla's GVA) each query/key head
serves num_v_heads / num_heads value heads; states (and CCQ statistics) are per value head.
"""

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax import checks as check
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.norm import GatedRMSNorm, RMSNorm
from ccq_jax.layers.params import inverse_softplus_dt, linear, log_uniform_a, param
from ccq_jax.layers.recurrent import RecurrentMixer
from ccq_jax.layers.remat import maybe_recomputed
from ccq_jax.layers.shapes import split_heads
from ccq_jax.ops import l2_inverse_norm

DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4


class GDNDims(NamedTuple):
    key_dim: int
    value_dim: int
    head_v_dim: int
    num_v_heads: int


def gdn_dims(num_heads, head_dim=256, expand_v=2.0, num_v_heads=None) -> GDNDims:
    """Validate Gated DeltaNet's sizes (ValueError naming the field) and derive fla's dimensions."""
    check.integer("num_heads", num_heads, minimum=1)
    check.integer("head_dim", head_dim, minimum=1)
    check.integer("num_v_heads", num_v_heads, minimum=1, optional=True)
    check.real("expand_v", expand_v, lo=0, lo_open=True)
    head_v_dim = int(head_dim * expand_v)
    if head_v_dim < 1 or not math.isclose(head_dim * expand_v, head_v_dim, rel_tol=1e-5):
        raise ValueError(f"expand_v: head_dim * expand_v = {head_dim * expand_v} must be a positive integer")
    v_heads = num_heads if num_v_heads is None else num_v_heads
    if v_heads < num_heads or v_heads % num_heads:
        raise ValueError(f"num_v_heads: must be a multiple of num_heads = {num_heads}, got {v_heads}")
    return GDNDims(num_heads * head_dim, v_heads * head_v_dim, head_v_dim, v_heads)


class GatedDeltaNet(RecurrentMixer):
    def __init__(self, hidden_size: int, *, num_heads: int = 6, head_dim: int = 256, expand_v: float = 2.0,
                 num_v_heads: int | None = None, use_gate: bool = True, use_short_conv: bool = True,
                 conv_size: int = 4, allow_neg_eigval: bool = False, norm_eps: float = 1e-5,
                 ccq: CCQConfig | None = None, kernel: KernelPolicy = KernelPolicy(), initializer_range: float = 0.02,
                 dtype=None, param_dtype=jnp.float32, recompute: bool = True, rngs: nnx.Rngs):
        d = gdn_dims(num_heads, head_dim, expand_v, num_v_heads)
        if not use_short_conv:
            warnings.warn("GatedDeltaNet: use_short_conv=False; fla calls the short convolutions crucial to "
                          "performance", stacklevel=2)
        self.num_heads, self.head_dim, self.dims = num_heads, head_dim, d
        self.allow_neg_eigval, self.use_gate = allow_neg_eigval, use_gate
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.q_proj = linear(hidden_size, d.key_dim, ("embed", "heads"), **kw)
        self.k_proj = linear(hidden_size, d.key_dim, ("embed", "heads"), **kw)
        self.v_proj = linear(hidden_size, d.value_dim, ("embed", "heads"), **kw)
        self.a_proj = linear(hidden_size, d.num_v_heads, ("embed", "heads"), **kw)
        self.b_proj = linear(hidden_size, d.num_v_heads, ("embed", "heads"), **kw)
        # A ~ U(0, 16] (fla), kept away from log(0); dt as Mamba-2's
        self.A_log = param(log_uniform_a(1e-4, 16.0), rngs.params(), (d.num_v_heads,), ("heads",), param_dtype)
        self.dt_bias = param(inverse_softplus_dt(DT_MIN, DT_MAX, DT_FLOOR), rngs.params(), (d.num_v_heads,),
                             ("heads",), param_dtype)
        if use_gate:
            self.g_proj = linear(hidden_size, d.value_dim, ("embed", "heads"), **kw)
        norm_cls = GatedRMSNorm if use_gate else RMSNorm
        self.o_norm = norm_cls(d.head_v_dim, eps=norm_eps, dtype=dtype, param_dtype=param_dtype, axis="kv",
                               recompute=recompute)
        self.o_proj = linear(d.value_dim, hidden_size, ("heads", "embed"), **kw)
        conv = (d.key_dim, d.key_dim, d.value_dim) if use_short_conv else None
        self._setup(state_heads=d.num_v_heads, head_k_dim=head_dim, head_v_dim=d.head_v_dim, conv_channels=conv,
                    conv_size=conv_size, ccq=ccq, kernel=kernel, recompute=recompute, **kw)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache=None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        q, k, v, conv = self._project(x, segment_ids, cache, silu_without_conv=True)
        groups = self.dims.num_v_heads // self.num_heads
        q, k = (qk_heads(t, self.head_dim, groups, self.recompute) for t in (q, k))
        v = split_heads(v, self.dims.head_v_dim)
        a = self.a_proj(x).astype(jnp.float32) + self.dt_bias[...].astype(jnp.float32)
        g = -jnp.exp(self.A_log[...].astype(jnp.float32)) * jax.nn.softplus(a)
        beta = jax.nn.sigmoid(self.b_proj(x).astype(jnp.float32))
        if self.allow_neg_eigval:
            beta = 2.0 * beta
        o, state, stats = self._read((ops.gated_delta_rule, ops.ccq_gated_delta_rule), q, k, (v, g, beta), segment_ids=segment_ids, cache=cache)
        return self._output(o, x, self.o_norm, self.use_gate), self._new_cache(cache, state, stats, conv)


def qk_heads(x, head_dim, groups, recompute):
    """[B, T, H*K] -> l2-normalised [B, T, H*groups, K], each query/key head repeated for its `groups` value heads
    (fla's GVA); recompute: see `ccq_jax.layers.remat`."""
    return jnp.repeat(maybe_recomputed(l2_normalized, recompute)(split_heads(x, head_dim)), groups, axis=2)


@jax.custom_vjp
def l2_normalized(x):
    """l2_normalize in fp32, returned in x's dtype. Its backward pass keeps the output y (the array the delta rule
    keeps too) and the fp32 inverse norm r ([..., 1]), not x: dx = r (dy - y <y, dy>), as y = r x. Autodiff would
    keep x and y both (and the fp32 copies)."""
    return _l2_forward(x)[0]


def _l2_forward(x):
    """(y, the residuals (y, r)): y = x r in fp32, r = `ops.l2_inverse_norm(x)`, y returned in x's dtype."""
    xf = x.astype(jnp.float32)
    r = l2_inverse_norm(xf)
    y = (xf * r).astype(x.dtype)
    return y, (y, r)


def _l2_backward(res, dy):
    # behind a barrier: else XLA forms y again from x inside the backward's fusion and keeps x alive for it
    y, r = jax.lax.optimization_barrier(res)
    yf, dyf = y.astype(jnp.float32), dy.astype(jnp.float32)
    return ((r * (dyf - yf * jnp.sum(yf * dyf, axis=-1, keepdims=True))).astype(dy.dtype),)


l2_normalized.defvjp(_l2_forward, _l2_backward)
