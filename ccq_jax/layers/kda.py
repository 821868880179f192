"""fla's `KimiDeltaAttention` (KDA) layer as a Flax NNX module, optionally with the CCQ read.

    q, k, v = silu(conv(q_proj(x))), silu(conv(k_proj(x))), silu(conv(v_proj(x)))   (SiLU alone without convs)
    q, k    = l2norm(q), l2norm(k)                                  (each repeated for its value heads: GVA)
    f       = f_proj.1(f_proj.0(x)) + dt_bias                       (low rank: D -> head_v_dim -> HV*K)
    g       = -exp(A_log) * softplus(f)                             (log decay per value head and key channel)
              lower_bound * sigmoid(exp(A_log) * f)                 (with lower_bound: fla's bounded gate)
    beta    = sigmoid(b_proj(x))                                    (x2 if allow_neg_eigval)
    o       = ops.kda(q, k, v, g, beta)  or  ops.ccq_kda(..., lam)
    y       = o_proj(o_norm(o, g_proj.1(g_proj.0(x))))              (o_norm: rmsnorm(o) * sigmoid(gate))

Parameter paths match fla 0.6's state_dict names (`q_proj`, `k_proj`, `v_proj`, `{q,k,v}_conv1d`, `f_proj.0`,
`f_proj.1`, `b_proj`, `A_log [HV]`, `dt_bias [HV*K]`, `g_proj.0`, `g_proj.1` (with bias), `o_norm`, `o_proj`), plus
`ccq.weight`, `ccq.bias`. `safe_gate` is fla's kernel hint (gates in [lower_bound, 0)): it needs `lower_bound` and
starts A_log at zero; the math is the bounded gate's. `ChannelDecayMixer` is what KDA and Gated DeltaNet-2
(`ccq_jax.layers.gdn2`) share: both read through the generalized delta rule, whose `kernel.impl="pallas"` is its
state pass on Triton on a GPU (interpreted on a CPU) and on Mosaic TPU on a TPU, the chunk factors XLA's.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax import checks as check
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.gated_deltanet import DT_FLOOR, DT_MAX, DT_MIN, gdn_dims, qk_heads
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.norm import GatedRMSNorm
from ccq_jax.layers.params import inverse_softplus_dt, linear, log_uniform_a, param
from ccq_jax.layers.recurrent import RecurrentMixer
from ccq_jax.layers.remat import maybe_recomputed
from ccq_jax.layers.shapes import split_heads


def check_kda_gate(safe_gate, lower_bound) -> None:
    """fla's rules for KDA's gate: lower_bound < 0 or None, and safe_gate only with a lower_bound."""
    check.real("lower_bound", lower_bound, hi=0.0, optional=True)
    if lower_bound == 0:
        raise ValueError("lower_bound: expected a negative log decay (fla recommends -5), got 0")
    if safe_gate and lower_bound is None:
        raise ValueError("lower_bound: must be set when safe_gate=True (fla recommends -5)")


@functools.partial(jax.checkpoint, static_argnums=(3,))
def channel_decay(f, a_log, dt_bias, lower_bound):
    """fla's KDA gate (`naive_kda_gate`, `naive_kda_lowerbound_gate`) in fp32: f [B, T, H, K], a_log [H],
    dt_bias [H, K] -> -exp(a_log) softplus(f + dt_bias), or with a `lower_bound`
    lower_bound * sigmoid(exp(a_log) (f + dt_bias)). Recomputed in the backward pass from f."""
    f = f.astype(jnp.float32) + dt_bias.astype(jnp.float32)
    rate = jnp.exp(a_log.astype(jnp.float32))[:, None]
    if lower_bound is None:
        return -rate * jax.nn.softplus(f)
    return lower_bound * jax.nn.sigmoid(rate * f)


class ChannelDecayMixer(RecurrentMixer):
    """KDA's and GDN-2's shared parts: q/k/v projections and short convs, the low-rank decay projection `f_proj`
    with `A_log` and `dt_bias`, the low-rank output gate `g_proj`, the sigmoid-gated `o_norm`, `o_proj`."""

    def _setup_channel_decay(self, hidden_size, *, num_heads, head_dim, expand_v, num_v_heads, decay_heads,
                             use_short_conv, conv_size, norm_eps, zero_a_log, ccq, kernel, recompute, kw):
        """decay_heads: the heads of the decay from the dims (KDA: the value heads; GDN-2: the query/key heads); kw: `linear`'s std, rngs, dtype and param_dtype."""
        d = gdn_dims(num_heads, head_dim, expand_v, num_v_heads)
        self.num_heads, self.head_dim, self.dims = num_heads, head_dim, d
        heads = decay_heads(d)
        self.q_proj = linear(hidden_size, d.key_dim, ("embed", "heads"), **kw)
        self.k_proj = linear(hidden_size, d.key_dim, ("embed", "heads"), **kw)
        self.v_proj = linear(hidden_size, d.value_dim, ("embed", "heads"), **kw)
        self.f_proj = nnx.List([linear(hidden_size, d.head_v_dim, ("embed", None), **kw),
                                linear(d.head_v_dim, heads * head_dim, (None, "heads"), **kw)])
        # A ~ U[1, 16] (fla's KDA and GDN-2); dt as Mamba-2's
        init = jax.nn.initializers.zeros if zero_a_log else log_uniform_a(1.0, 16.0)
        self.A_log = param(init, kw["rngs"].params(), (heads,), ("heads",), kw["param_dtype"])
        self.dt_bias = param(inverse_softplus_dt(DT_MIN, DT_MAX, DT_FLOOR), kw["rngs"].params(), (heads * head_dim,),
                             ("heads",), kw["param_dtype"])
        self.g_proj = nnx.List([linear(hidden_size, d.head_v_dim, ("embed", None), **kw),
                                linear(d.head_v_dim, d.value_dim, (None, "heads"), use_bias=True, **kw)])
        self.o_norm = GatedRMSNorm(d.head_v_dim, activation="sigmoid", eps=norm_eps, dtype=kw["dtype"],
                                   param_dtype=kw["param_dtype"], axis="kv", recompute=recompute)
        self.o_proj = linear(d.value_dim, hidden_size, ("heads", "embed"), **kw)
        conv = (d.key_dim, d.key_dim, d.value_dim) if use_short_conv else None
        self._setup(state_heads=d.num_v_heads, head_k_dim=head_dim, head_v_dim=d.head_v_dim, conv_channels=conv,
                    conv_size=conv_size, ccq=ccq, kernel=kernel, recompute=recompute, **kw)

    def _output_gate(self, x):
        return self.g_proj[1](self.g_proj[0](x))

    def _heads_and_decay(self, x, segment_ids, cache, lower_bound=None):
        """(q, k [B, T, HV, K] l2-normalised, v [B, T, HV, V], g [B, T, decay heads, K] fp32, new conv tails)."""
        q, k, v, conv = self._project(x, segment_ids, cache, silu_without_conv=True)
        groups = self.dims.num_v_heads // self.num_heads
        q, k = (qk_heads(t, self.head_dim, groups, self.recompute) for t in (q, k))
        f = split_heads(self.f_proj[1](self.f_proj[0](x)), self.head_dim)
        dt_bias = self.dt_bias[...].reshape(f.shape[2], self.head_dim)
        g = maybe_recomputed(channel_decay, self.recompute)(f, self.A_log[...], dt_bias, lower_bound)
        return q, k, split_heads(v, self.dims.head_v_dim), g, conv


class KimiDeltaAttention(ChannelDecayMixer):
    def __init__(self, hidden_size: int, *, num_heads: int = 16, head_dim: int = 128, expand_v: float = 1.0,
                 num_v_heads: int | None = None, use_short_conv: bool = True, conv_size: int = 4,
                 allow_neg_eigval: bool = False, safe_gate: bool = False, lower_bound: float | None = None,
                 norm_eps: float = 1e-5, ccq: CCQConfig | None = None, kernel: KernelPolicy = KernelPolicy(),
                 initializer_range: float = 0.02, dtype=None, param_dtype=jnp.float32, recompute: bool = True,
                 rngs: nnx.Rngs):
        check_kda_gate(safe_gate, lower_bound)
        self.allow_neg_eigval, self.safe_gate, self.lower_bound = allow_neg_eigval, safe_gate, lower_bound
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self._setup_channel_decay(
            hidden_size, num_heads=num_heads, head_dim=head_dim, expand_v=expand_v, num_v_heads=num_v_heads,
            decay_heads=lambda d: d.num_v_heads,
            use_short_conv=use_short_conv, conv_size=conv_size, norm_eps=norm_eps, zero_a_log=safe_gate, ccq=ccq,
            kernel=kernel, recompute=recompute, kw=kw)
        self.b_proj = linear(hidden_size, self.dims.num_v_heads, ("embed", "heads"), **kw)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache=None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        q, k, v, g, conv = self._heads_and_decay(x, segment_ids, cache, self.lower_bound)
        beta = jax.nn.sigmoid(self.b_proj(x).astype(jnp.float32))
        if self.allow_neg_eigval:
            beta = 2.0 * beta
        o, state, stats = self._read((ops.kda, ops.ccq_kda), q, k, (v, g, beta), segment_ids=segment_ids,
                                     cache=cache)
        return self._output(o, x, self.o_norm, True), self._new_cache(cache, state, stats, conv)
