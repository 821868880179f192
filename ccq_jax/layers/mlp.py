"""The SwiGLU MLP every model uses (fla's `GatedMLP`): down(silu(gate(x)) * up(x))."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers.params import linear
from ccq_jax.layers.remat import maybe_recomputed


def mlp_width(hidden_size: int, hidden_ratio: int = 4, intermediate_size: int | None = None) -> int:
    """fla's rule: `intermediate_size`, else int(D * ratio * 2/3) rounded up to a multiple of 256."""
    if intermediate_size is not None:
        return intermediate_size
    width = int(hidden_size * hidden_ratio * 2 / 3)
    return 256 * ((width + 255) // 256)


class GatedMLP(nnx.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, *, std: float, rngs: nnx.Rngs, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True):
        self.recompute = recompute  # see ccq_jax.layers.remat
        kw = dict(std=std, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        self.gate_proj = linear(hidden_size, intermediate_size, ("embed", "mlp"), **kw)
        self.up_proj = linear(hidden_size, intermediate_size, ("embed", "mlp"), **kw)
        self.down_proj = linear(intermediate_size, hidden_size, ("mlp", "embed"), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        down = maybe_recomputed(swiglu_down, self.recompute)
        return down(self.gate_proj(x), self.up_proj(x), self.down_proj.kernel[...], self.down_proj.dtype)


@functools.partial(jax.checkpoint, static_argnums=(3,))
def swiglu_down(gate, up, kernel, dtype):
    """(silu(gate) * up) @ kernel in `dtype` (None: the operands' common type, as `nnx.Linear`), recomputed in the
    backward pass from gate and up: autodiff would otherwise keep silu's intermediates and the product too
    (fla's fused SwiGLU keeps gate and up alone)."""
    h = jax.nn.silu(gate) * up
    dtype = dtype or jnp.result_type(h, kernel)
    return jnp.dot(h.astype(dtype), kernel.astype(dtype))
