"""RMSNorm and the gated RMSNorm of fla's output heads (`RMSNorm`, `FusedRMSNormGated` with swish)."""

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers.params import param


def _rms_normalize(x, eps):
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


class RMSNorm(nnx.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, in fp32; returned in `dtype` (default: x's).

    `weight [D]` starts at ones; `axis` is its logical sharding name ("norm" over the model
    width, "kv" over one head's features).
    """

    def __init__(self, num_features: int, *, eps: float = 1e-6, dtype=None, param_dtype=jnp.float32,
                 axis: str = "norm"):
        self.eps = eps
        self.dtype = dtype
        self.weight = param(jax.nn.initializers.ones, None, (num_features,), (axis,), param_dtype)

    def _out(self, y, x):
        return y.astype(self.dtype or x.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self._out(_rms_normalize(x, self.eps) * self.weight[...].astype(jnp.float32), x)


class GatedRMSNorm(RMSNorm):
    """fla's `FusedRMSNormGated` (swish): rmsnorm(x) * weight * silu(gate), in fp32."""

    def __call__(self, x: jax.Array, gate: jax.Array) -> jax.Array:
        y = _rms_normalize(x, self.eps) * self.weight[...].astype(jnp.float32)
        return self._out(y * jax.nn.silu(gate.astype(jnp.float32)), x)
