"""How the layers create parameters: fla's initialisers, logical sharding axis names, dtypes.

Every parameter carries logical axis names (flax `out_sharding` metadata) from `AXES`:

    embed  model width D                 heads  fused heads x head dim (H*K, H*V) or one value per head
    kv     the feature dim of one head   mlp    MLP width F
    vocab  vocabulary E                  conv   short-convolution taps
    norm   a norm's weight over D

`nnx.get_partition_spec(nnx.state(model))` returns them, and training maps them to mesh
axes with one rules table (`nnx.logical_axis_rules`). Parameters are sharded eagerly at
construction only when a mesh is active (flax's eager sharding); without a mesh the names
are metadata only, so models build anywhere.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx
from flax.core import meta

AXES = ("embed", "heads", "kv", "mlp", "vocab", "conv", "norm")


def sharded(init, *names):
    """`init` wrapped so the variable it creates carries the logical axis `names`."""
    unknown = [n for n in names if n is not None and n not in AXES]
    if unknown:
        raise ValueError(f"names: unknown logical axis {unknown[0]!r}; expected one of {AXES} or None")
    eager = None if meta.global_mesh_defined() else False
    return nnx.with_partitioning(init, names, eager_sharding=eager)


def param(init, key, shape, names, dtype) -> nnx.Param:
    """A parameter of `shape` drawn from `init(key, shape, dtype)` with logical axis `names`."""
    return nnx.Param(sharded(init, *names)(key, shape, dtype))


def normal(std: float):
    return jax.nn.initializers.normal(std)


def linear(in_features, out_features, names, *, std, rngs, dtype=None, param_dtype=jnp.float32, use_bias=False,
           kernel_init=None):
    """fla's `nn.Linear` as flax: kernel [in, out] ~ N(0, std) (torch weight transposed; `kernel_init` instead when
    given), zero bias."""
    return nnx.Linear(
        in_features, out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
        kernel_init=sharded(kernel_init or normal(std), *names), bias_init=sharded(jax.nn.initializers.zeros, names[1]),
        rngs=rngs,
    )


def log_uniform_a(lo: float, hi: float):
    """Initialiser of `A_log`: log(A) with A ~ U(lo, hi] (fla's Gated DeltaNet and Mamba2), fp32 then `dtype`."""
    def init(key, shape, dtype):
        return jnp.log(jax.random.uniform(key, shape, jnp.float32, minval=lo, maxval=hi)).astype(dtype)

    return init


def symmetric_uniform(bound: float):
    """Initialiser drawing U(-bound, bound) in fp32, then `dtype`."""
    def init(key, shape, dtype):
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)

    return init


def inverse_softplus_dt(dt_min: float, dt_max: float, floor: float):
    """Initialiser of `dt_bias`: softplus^-1(dt) with log dt ~ U(log dt_min, log dt_max), dt >= floor (Mamba-2)."""
    def init(key, shape, dtype):
        u = jax.random.uniform(key, shape, jnp.float32)
        dt = jnp.maximum(jnp.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)), floor)
        return (dt + jnp.log(-jnp.expm1(-dt))).astype(dtype)

    return init
