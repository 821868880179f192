"""fla's `GatedDeltaNet2` (GDN-2) layer as a Flax NNX module, optionally with the CCQ read.

    q, k, v = silu(conv(q_proj(x))), silu(conv(k_proj(x))), silu(conv(v_proj(x)))   (SiLU alone without convs)
    q, k    = l2norm(q), l2norm(k)
    g       = -exp(A_log) * softplus(f_proj.1(f_proj.0(x)) + dt_bias)   (log decay per query/key head and channel)
    b, w    = sigmoid(b_proj(x)) [.., K], sigmoid(w_proj(x)) [.., V]   (erase and write gates; b x2 if allow_neg_eigval)
    o       = ops.generalized_delta_rule(q, k, w * v, g, b * k)  or  ops.ccq_generalized_delta_rule(..., lam)
    y       = o_proj(o_norm(o, g_proj.1(g_proj.0(x))))                  (o_norm: rmsnorm(o) * sigmoid(gate))

that is S_t = (I - k_t (b_t * k_t)^T) Diag(exp g_t) S_{t-1} + k_t (w_t * v_t)^T, fla's `naive_recurrent_gdn2`.
With GVA (num_v_heads > num_heads) q, k, g and b are repeated for each query/key head's value heads, as fla does.
The layer builds the erase vector and the written value itself and reads through `generalized_delta_rule`, since
fla's allow_neg_eigval takes b to [0, 2], outside `ops.gated_delta_rule_2`'s gate range.

Parameter paths match fla 0.6's state_dict names (`q_proj`, `k_proj`, `v_proj`, `{q,k,v}_conv1d`, `f_proj.0`,
`f_proj.1`, `b_proj`, `w_proj`, `A_log [H]`, `dt_bias [H*K]`, `g_proj.0`, `g_proj.1` (with bias), `o_norm`,
`o_proj`), plus `ccq.weight`, `ccq.bias`. fla has no GDN-2 model class: the layer's names are the whole contract.
"""

import jax
import jax.numpy as jnp
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.kda import ChannelDecayMixer
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.params import linear
from ccq_jax.layers.shapes import split_heads


class GatedDeltaNet2(ChannelDecayMixer):
    def __init__(self, hidden_size: int, *, num_heads: int = 16, head_dim: int = 128, expand_v: float = 1.0,
                 num_v_heads: int | None = None, use_short_conv: bool = True, conv_size: int = 4,
                 allow_neg_eigval: bool = False, norm_eps: float = 1e-5, ccq: CCQConfig | None = None,
                 kernel: KernelPolicy = KernelPolicy(), initializer_range: float = 0.02, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True, rngs: nnx.Rngs):
        self.allow_neg_eigval = allow_neg_eigval
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self._setup_channel_decay(
            hidden_size, num_heads=num_heads, head_dim=head_dim, expand_v=expand_v,
            num_v_heads=num_v_heads, decay_heads=lambda d: num_heads, use_short_conv=use_short_conv,
            conv_size=conv_size, norm_eps=norm_eps, zero_a_log=False, ccq=ccq, kernel=kernel, recompute=recompute,
            kw=kw)
        self.b_proj = linear(hidden_size, self.dims.key_dim, ("embed", "heads"), **kw)
        self.w_proj = linear(hidden_size, self.dims.value_dim, ("embed", "heads"), **kw)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache=None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        q, k, v, g, conv = self._heads_and_decay(x, segment_ids, cache)
        groups = self.dims.num_v_heads // self.num_heads
        b = jax.nn.sigmoid(split_heads(self.b_proj(x), self.head_dim).astype(jnp.float32))
        if self.allow_neg_eigval:
            b = 2.0 * b
        g, b = jnp.repeat(g, groups, axis=2), jnp.repeat(b, groups, axis=2)
        w = jax.nn.sigmoid(split_heads(self.w_proj(x), self.dims.head_v_dim).astype(jnp.float32))
        written, erase = (w * v).astype(v.dtype), (b * k).astype(k.dtype)
        o, state, stats = self._read((ops.generalized_delta_rule, ops.ccq_generalized_delta_rule), q, k,
                                     (written, g, erase), segment_ids=segment_ids, cache=cache)
        return self._output(o, x, self.o_norm, True), self._new_cache(cache, state, stats, conv)
