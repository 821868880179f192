"""fla's `ShortConvolution`: a causal depthwise 1-D convolution followed by SiLU, document-aware and cacheable.

    y_t = silu( sum_{i=0}^{W-1} kernel[i] * x_{t-W+1+i} )      (taps from other documents count as zero)

`kernel [W, C]` is torch's depthwise `weight [C, 1, W]` transposed. The cache is the tail of
the last W-1 inputs `[B, W-1, C]`; it belongs to the document at position 0 of the next call,
exactly like the initial state of the ops, so prefill + decode equal one full pass.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers.params import normal, param
from ccq_jax.layers.remat import maybe_recomputed


class ShortConvolution(nnx.Module):
    def __init__(self, channels: int, kernel_size: int, *, std: float, rngs: nnx.Rngs, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True):
        self.kernel_size = kernel_size
        self.recompute = recompute  # see ccq_jax.layers.remat
        self.dtype = dtype
        self.kernel = param(normal(std), rngs.params(), (kernel_size, channels), ("conv", "heads"), param_dtype)

    def init_cache(self, batch_size: int, dtype) -> jax.Array:
        return jnp.zeros((batch_size, self.kernel_size - 1, self.kernel.shape[1]), dtype)

    def __call__(self, x: jax.Array, docs: jax.Array, tail: jax.Array | None = None):
        """x: [B, T, C]; docs: monotone document index [B, T]; tail: [B, W-1, C] or None (zeros).

        Returns (y [B, T, C], new tail: the last W-1 inputs of the last document, zero elsewhere).
        """
        b, t, c = x.shape
        width = self.kernel_size
        dtype = self.dtype or x.dtype
        if tail is None:
            tail = jnp.zeros((b, width - 1, c), x.dtype)
        ext = jnp.concatenate([tail.astype(x.dtype), x], axis=1)  # [B, W-1+T, C]
        ext_docs = jnp.concatenate([jnp.broadcast_to(docs[:, :1], (b, width - 1)), docs], axis=1)
        in_last = (ext_docs[:, t:] == docs[:, -1:])[..., None]
        new_tail = jnp.where(in_last, ext[:, t:], jnp.zeros((), x.dtype))
        conv = maybe_recomputed(causal_conv_silu, self.recompute)
        return conv(ext, ext_docs, docs, self.kernel[...], dtype), new_tail


@functools.partial(jax.checkpoint, static_argnums=(4,))
def causal_conv_silu(ext, ext_docs, docs, kernel, dtype):
    """silu(sum_i kernel[i] * ext[t + i]) in fp32, returned in `dtype`: ext [B, W-1+T, C] (the tail, then x), taps
    from another document than `docs` [B, T] counting as zero. Recomputed in the backward pass from ext: autodiff
    would otherwise keep an fp32 copy of every tap (fla's causal_conv1d keeps the input alone)."""
    t = docs.shape[1]
    kernel = kernel.astype(jnp.float32)
    acc = jnp.zeros((ext.shape[0], t, ext.shape[2]), jnp.float32)
    for i in range(kernel.shape[0]):
        same = (ext_docs[:, i:i + t] == docs)[..., None]
        acc = acc + jnp.where(same, ext[:, i:i + t].astype(jnp.float32), 0.0) * kernel[i]
    return jax.nn.silu(acc).astype(dtype)
