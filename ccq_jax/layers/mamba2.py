"""fla's `Mamba2` layer (SSD) as a Flax NNX module, optionally with the CCQ read.

    z, xBC, dt = split(in_proj(x), [I, I + 2 G N, H])          (I = expand * D = H * P)
    x, B, C    = split(silu(conv1d(xBC)), [I, G N, G N])        (a depthwise causal conv with bias; its cache the tail)
    dt         = clamp(softplus(dt + dt_bias), *dt_limit)        [B, T, H] fp32
    h_t        = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T            A = -exp(A_log) per head: h [B, H, N, P]
    y_t        = C_t^T h_t + D x_t                               (B, C of group g shared by its H / G heads)
    out        = out_proj(norm(y, z))                            (y * silu(z) without rmsnorm)

SSD is a scalar-decay linear attention: `ops.gla` with C as the query, B as the key, dt * x as the
value, the per-head log decay dt * A broadcast over the N key channels, scale 1 (not N**-0.5), and
D x added afterwards; head h reads group h // (H / G), as the mamba_ssm kernels fla runs do. The state
is ops' `[B, H, N, P]` (fla's `[B, H, P, N]` transposed). `norm` is fla's `RMSNormGated` over groups
of I / G features, gate before the norm unless `norm_before_gate`.

CCQ (C reads, B writes): `ops.ccq_gla` cleans C with the running covariance of the keys B before the
read, with the gate lambda from C; the write (state update) is unchanged. With `CCQConfig.normalize_keys`
(the default) the statistics are built from the L2-normalised B, as on the other backbones: Mamba2's
B is unnormalised and its scale moves with the input, which would move Sigma's scale (and so the
read's effective lambda) with it. scale 1 applies to the read itself, not to the statistics.

Parameter paths match fla's state_dict names (`in_proj`, `conv1d` (+ `bias`), `dt_bias`, `A_log`, `D`,
`norm`, `out_proj`), plus `ccq.weight [H, N]`, `ccq.bias [H]` when CCQ is configured.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax import checks as check
from ccq_jax.layers.cache import RecurrentCache
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.conv import ShortConvolution
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.norm import GroupedGatedRMSNorm
from ccq_jax.layers.params import inverse_softplus_dt, linear, log_uniform_a, param, symmetric_uniform
from ccq_jax.layers.recurrent import RecurrentMixer
from ccq_jax.layers.shapes import split_heads

# the SSD read on the ops: GLA with scale 1 (C and B are not scaled by N**-0.5)
READS = (functools.partial(ops.gla, scale=1.0), functools.partial(ops.ccq_gla, scale=1.0))


class Mamba2Dims(NamedTuple):
    intermediate_size: int
    num_heads: int
    conv_dim: int


def mamba2_dims(hidden_size, head_dim=64, state_size=128, expand=2, n_groups=1, num_heads=None) -> Mamba2Dims:
    """Validate Mamba2's sizes (ValueError naming the field) and derive fla's: I = int(expand * hidden_size),
    H = I / head_dim (num_heads, if given, must equal it), the conv's I + 2 G N channels."""
    for name, value in (("hidden_size", hidden_size), ("head_dim", head_dim), ("state_size", state_size),
                        ("n_groups", n_groups)):
        check.integer(name, value, minimum=1)
    check.real("expand", expand, lo=0, lo_open=True)
    intermediate = int(expand * hidden_size)
    if intermediate < head_dim or intermediate % head_dim:
        raise ValueError(f"head_dim: must divide int(expand * hidden_size) = {intermediate}, got {head_dim}")
    heads = intermediate // head_dim
    if num_heads is not None and num_heads != heads:
        raise ValueError(f"num_heads: must equal int(expand * hidden_size) / head_dim = {heads}, got {num_heads}")
    if heads % n_groups:
        raise ValueError(f"n_groups: must divide the {heads} heads, got {n_groups}")
    return Mamba2Dims(intermediate, heads, intermediate + 2 * n_groups * state_size)


class Mamba2(RecurrentMixer):
    def __init__(self, hidden_size: int, *, head_dim: int = 64, state_size: int = 128, expand: float = 2,
                 n_groups: int = 1, conv_kernel: int = 4, use_conv_bias: bool = True, conv_init: float | None = None,
                 A_init_range: tuple[float, float] = (1.0, 16.0), D_has_hdim: bool = False, rmsnorm: bool = True,
                 norm_before_gate: bool = False, dt_min: float = 1e-3, dt_max: float = 0.1,
                 dt_init_floor: float = 1e-4, dt_limit: tuple[float, float] = (0.0, math.inf), use_bias: bool = False,
                 norm_eps: float = 1e-5, rescale_layers: int | None = None, ccq: CCQConfig | None = None,
                 kernel: KernelPolicy = KernelPolicy(), initializer_range: float = 0.02, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True, rngs: nnx.Rngs):
        """Arguments as fla's `Mamba2`; rescale_layers: the model's layer count when out_proj takes fla's
        `rescale_prenorm_residual` init (U(+-1/sqrt(I)) / sqrt(layers)), None for normal(initializer_range)."""
        d = mamba2_dims(hidden_size, head_dim, state_size, expand, n_groups)
        self.dims, self.head_dim, self.state_size, self.n_groups = d, head_dim, state_size, n_groups
        self.dt_limit, self.rmsnorm = tuple(dt_limit), rmsnorm
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.in_proj = linear(hidden_size, d.intermediate_size + d.conv_dim + d.num_heads, ("embed", "heads"),
                              use_bias=use_bias, **kw)
        self.conv1d = ShortConvolution(d.conv_dim, conv_kernel, use_bias=use_conv_bias, recompute=recompute,
                                       kernel_init=None if conv_init is None else symmetric_uniform(conv_init),
                                       axes=kernel.axes, **kw)
        heads = (d.num_heads,)
        self.dt_bias = param(inverse_softplus_dt(dt_min, dt_max, dt_init_floor), rngs.params(), heads, ("heads",),
                             param_dtype)
        self.A_log = param(log_uniform_a(*A_init_range), rngs.params(), heads, ("heads",), param_dtype)
        self.D = param(jax.nn.initializers.ones, None, (d.intermediate_size,) if D_has_hdim else heads, ("heads",),
                       param_dtype)
        if rmsnorm:
            self.norm = GroupedGatedRMSNorm(d.intermediate_size, group_size=d.intermediate_size // n_groups,
                                            norm_before_gate=norm_before_gate, eps=norm_eps, dtype=dtype,
                                            param_dtype=param_dtype, axis="heads", recompute=recompute)
        rescaled = None if rescale_layers is None else symmetric_uniform(
            1.0 / math.sqrt(d.intermediate_size) / math.sqrt(rescale_layers))
        self.out_proj = linear(d.intermediate_size, hidden_size, ("heads", "embed"), use_bias=use_bias,
                               kernel_init=rescaled, **kw)
        self._setup(state_heads=d.num_heads, head_k_dim=state_size, head_v_dim=head_dim, conv_channels=None,
                    conv_size=conv_kernel, ccq=ccq, kernel=kernel, recompute=recompute, **kw)

    def init_cache(self, batch_size: int, max_length: int | None = None) -> RecurrentCache:
        """Zeros: the SSM state [B, H, N, P], CCQ statistics, and the conv's tail [B, W-1, I + 2 G N] as `conv[0]`."""
        cache = super().init_cache(batch_size, max_length)
        return cache._replace(conv=(self.conv1d.init_cache(batch_size, jnp.dtype(self.dtype or self.param_dtype)),))

    def _skip(self):
        """D as [H, P] (fp32): one value per head, or per channel with D_has_hdim."""
        d = self.D[...].astype(jnp.float32)
        return d.reshape(-1, self.head_dim) if d.shape[0] == self.dims.intermediate_size else d[:, None]

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache=None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        d, f32 = self.dims, jnp.float32
        z, xbc, dt = jnp.split(self.in_proj(x), [d.intermediate_size, d.intermediate_size + d.conv_dim], axis=-1)
        xbc, tail = self.conv1d(xbc, segment_ids, None if cache is None else cache.conv[0])
        xs, b, c = jnp.split(xbc, [d.intermediate_size, d.intermediate_size + self.n_groups * self.state_size], -1)
        xs = split_heads(xs, self.head_dim)
        b, c = (jnp.repeat(split_heads(t, self.state_size), d.num_heads // self.n_groups, axis=2) for t in (b, c))
        dt = jnp.clip(jax.nn.softplus(dt.astype(f32) + self.dt_bias[...].astype(f32)), *self.dt_limit)
        g = dt * -jnp.exp(self.A_log[...].astype(f32))  # [B, T, H] log decay
        gk = jnp.broadcast_to(g[..., None], (*g.shape, self.state_size))
        v = (xs.astype(f32) * dt[..., None]).astype(xs.dtype)
        o, state, stats = self._read(READS, c, b, (v, gk), segment_ids=segment_ids, cache=cache)
        y = o.astype(f32) + xs.astype(f32) * self._skip()
        y = y.reshape(*y.shape[:2], -1)
        out_dtype = self.dtype or x.dtype
        y = self.norm(y, z) if self.rmsnorm else (y * jax.nn.silu(z.astype(f32))).astype(out_dtype)
        new_cache = None if cache is None else RecurrentCache(state, stats, (tail.astype(cache.conv[0].dtype),))
        return self.out_proj(y), new_cache
