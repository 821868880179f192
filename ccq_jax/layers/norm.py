"""RMSNorm and the gated RMSNorms of fla's output heads (`RMSNorm`, `FusedRMSNormGated` with swish or (KDA,
Gated DeltaNet-2) sigmoid, and Mamba2's grouped `RMSNormGated`)."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers.params import param
from ccq_jax.layers.remat import maybe_recomputed


def _rms_normalize(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, fp32."""
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight.astype(jnp.float32)


# The norms are recomputed in the backward pass from their inputs (jax.checkpoint): autodiff would
# otherwise keep their fp32 intermediates, several [B, T, D] fp32 tensors per norm (fla's fused norms
# keep the input and 1/rms likewise).
@functools.partial(jax.checkpoint, static_argnums=(2, 3))
def rms_norm(x, weight, eps, dtype):
    """fla's RMSNorm, computed in fp32, returned in `dtype`."""
    return _rms_normalize(x, weight, eps).astype(dtype)


def _gated(x, gate, weight, eps, dtype, activation):
    """rms_norm(x) * activation(gate), computed in fp32, returned in `dtype`."""
    return (_rms_normalize(x, weight, eps) * activation(gate.astype(jnp.float32))).astype(dtype)


@functools.partial(jax.checkpoint, static_argnums=(3, 4))
def gated_rms_norm(x, gate, weight, eps, dtype):
    """fla's FusedRMSNormGated (swish): rms_norm(x) * silu(gate), computed in fp32, returned in `dtype`."""
    return _gated(x, gate, weight, eps, dtype, jax.nn.silu)


@functools.partial(jax.checkpoint, static_argnums=(3, 4))
def sigmoid_gated_rms_norm(x, gate, weight, eps, dtype):
    """fla's FusedRMSNormGated with activation="sigmoid": rms_norm(x) * sigmoid(gate), fp32, returned in `dtype`."""
    return _gated(x, gate, weight, eps, dtype, jax.nn.sigmoid)


GATED_NORMS = {"swish": gated_rms_norm, "sigmoid": sigmoid_gated_rms_norm}  # fla's FusedRMSNormGated activations


@functools.partial(jax.checkpoint, static_argnums=(3, 4, 5, 6))
def grouped_gated_rms_norm(x, gate, weight, eps, dtype, group_size, norm_before_gate):
    """fla's RMSNormGated (Mamba2's `norm`): over each group of `group_size` features of the last axis,
    rms_norm(x * silu(gate)) * weight, or with `norm_before_gate` rms_norm(x) * weight * silu(gate); fp32, returned
    in `dtype`."""
    gate = jax.nn.silu(gate.astype(jnp.float32))
    x = x.astype(jnp.float32)
    if not norm_before_gate:
        x = x * gate
    groups = (*x.shape[:-1], x.shape[-1] // group_size, group_size)
    out = _rms_normalize(x.reshape(groups), weight.reshape(groups[-2:]), eps).reshape(x.shape)
    return (out * gate if norm_before_gate else out).astype(dtype)


class RMSNorm(nnx.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, in fp32; returned in `dtype` (default: x's).

    `weight [D]` starts at ones; `axis` is its logical sharding name ("norm" over the model
    width, "kv" over one head's features); `recompute`: see `ccq_jax.layers.remat`.
    """

    def __init__(self, num_features: int, *, eps: float = 1e-6, dtype=None, param_dtype=jnp.float32,
                 axis: str = "norm", recompute: bool = True):
        self.eps = eps
        self.dtype = dtype
        self.recompute = recompute
        self.weight = param(jax.nn.initializers.ones, None, (num_features,), (axis,), param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return maybe_recomputed(rms_norm, self.recompute)(x, self.weight[...], self.eps, self.dtype or x.dtype)


class GatedRMSNorm(RMSNorm):
    """fla's `FusedRMSNormGated`: rmsnorm(x) * weight * act(gate), in fp32; `activation` "swish" (fla's default) or
    "sigmoid" (KDA's and Gated DeltaNet-2's o_norm)."""

    def __init__(self, num_features: int, *, activation: str = "swish", **kwargs):
        if activation not in GATED_NORMS:
            raise ValueError(f"activation: expected one of {list(GATED_NORMS)}, got {activation!r}")
        super().__init__(num_features, **kwargs)
        self.activation = activation

    def __call__(self, x: jax.Array, gate: jax.Array) -> jax.Array:
        norm = maybe_recomputed(GATED_NORMS[self.activation], self.recompute)
        return norm(x, gate, self.weight[...], self.eps, self.dtype or x.dtype)


class GroupedGatedRMSNorm(RMSNorm):
    """fla's `RMSNormGated` (Mamba2's `norm`, see `grouped_gated_rms_norm`): `weight [D]` over groups of
    `group_size` features, the gate applied before the norm unless `norm_before_gate`."""

    def __init__(self, num_features: int, *, group_size: int, norm_before_gate: bool = False, **kwargs):
        if group_size < 1 or num_features % group_size:
            raise ValueError(f"group_size: must divide num_features = {num_features}, got {group_size}")
        super().__init__(num_features, **kwargs)
        self.group_size, self.norm_before_gate = group_size, norm_before_gate

    def __call__(self, x: jax.Array, gate: jax.Array) -> jax.Array:
        norm = maybe_recomputed(grouped_gated_rms_norm, self.recompute)
        return norm(x, gate, self.weight[...], self.eps, self.dtype or x.dtype, self.group_size,
                    self.norm_before_gate)
