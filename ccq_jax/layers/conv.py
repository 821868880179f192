"""fla's `ShortConvolution`: a causal depthwise 1-D convolution followed by SiLU, document-aware and cacheable.

    y_t = silu( bias + sum_{i=0}^{W-1} kernel[i] * x_{t-W+1+i} )      (taps from other documents count as zero)

`kernel [W, C]` is torch's depthwise `weight [C, 1, W]` transposed; `bias [C]` (torch's Conv1d bias, Mamba2's
`conv1d`) only with `use_bias`. The cache is the tail of
the last W-1 inputs `[B, W-1, C]`; it belongs to the document at position 0 of the next call,
exactly like the initial state of the ops, so prefill + decode equal one full pass.

Under a mesh that splits sequences over the `context` axis of its `axes` (`ccq_jax.ops.OpsAxes`, the layer's
`KernelPolicy.axes`; `ccq_jax.ops.sharding`), each device convolves its own
tokens: the previous device's tail (its last W-1 inputs of its last document: the halo) comes by one
`ppermute` and counts only where that document continues into this shard (`Shard.continues`).
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from ccq_jax.layers.params import normal, param
from ccq_jax.layers.remat import maybe_recomputed
from ccq_jax.ops import OpsAxes, doc_ids, sharding


class ShortConvolution(nnx.Module):
    def __init__(self, channels: int, kernel_size: int, *, std: float, rngs: nnx.Rngs, dtype=None,
                 param_dtype=jnp.float32, recompute: bool = True, axes: OpsAxes = OpsAxes(), use_bias: bool = False,
                 kernel_init=None):
        """kernel_init: the kernel's initialiser (default normal(std)); use_bias: a bias [C], zero at init."""
        self.kernel_size = kernel_size
        self.axes = axes  # the mesh axes it splits over (see the module docstring)
        self.recompute = recompute  # see ccq_jax.layers.remat
        self.dtype = dtype
        self.kernel = param(kernel_init or normal(std), rngs.params(), (kernel_size, channels), ("conv", "heads"),
                            param_dtype)
        self.use_bias = use_bias
        if use_bias:
            self.bias = param(jax.nn.initializers.zeros, None, (channels,), ("heads",), param_dtype)

    def init_cache(self, batch_size: int, dtype) -> jax.Array:
        return jnp.zeros((batch_size, self.kernel_size - 1, self.kernel.shape[1]), dtype)

    def __call__(self, x: jax.Array, segment_ids: jax.Array | None = None, tail: jax.Array | None = None):
        """x: [B, T, C]; segment_ids [B, T] or None; tail: [B, W-1, C] or None (zeros).

        Returns (y [B, T, C], new tail: the last W-1 inputs of the last document, zero elsewhere).
        """
        if tail is None:
            tail = jnp.zeros((x.shape[0], self.kernel_size - 1, x.shape[2]), x.dtype)
        conv = functools.partial(convolve, dtype=self.dtype or x.dtype, recompute=self.recompute)
        bias = self.bias[...] if self.use_bias else None
        axis = sharding.mesh_axis(self.axes, x.shape[1], "x")
        if axis is None:
            return conv(x, segment_ids, tail, self.kernel[...], bias=bias)
        return _split(conv, self.axes, x, segment_ids, tail, self.kernel[...], bias)


def convolve(x, segment_ids, tail, kernel, *, dtype, recompute, context_axis=None, bias=None):
    """`ShortConvolution` on arrays (see its `__call__`; bias [C] or None); with `context_axis` (inside
    `jax.shard_map`, T split over that mesh axis), on this device's tokens, the tail taken from the previous device
    except on the first."""
    b, t, c = x.shape
    docs = doc_ids(segment_ids, b, t)
    if context_axis is not None:
        width = kernel.shape[0]
        if t < width - 1:
            raise ValueError(f"x: each device's {t} tokens are fewer than the convolution's {width - 1}-token halo; "
                             f"use longer sequences or fewer devices on the {context_axis!r} axis")
        own = last_document_tail(x, docs, docs, width)
        shard = sharding.Shard.of(segment_ids, b, t, context_axis)
        first = jax.lax.axis_index(context_axis) == 0
        halo = jnp.where(shard.continues[:, None, None], sharding.shifted(own, 1, context_axis), 0)
        tail = jnp.where(first, tail, halo.astype(tail.dtype))
    ext = jnp.concatenate([tail.astype(x.dtype), x], axis=1)  # [B, W-1+T, C]
    ext_docs = jnp.concatenate([jnp.broadcast_to(docs[:, :1], (b, kernel.shape[0] - 1)), docs], axis=1)
    new_tail = last_document_tail(ext, ext_docs, docs, kernel.shape[0])
    return maybe_recomputed(causal_conv_silu, recompute)(ext, ext_docs, docs, kernel, dtype, bias), new_tail


def last_document_tail(values, value_docs, docs, width):
    """The last W-1 of `values` [B, L, C] (their documents `value_docs` [B, L]) where they belong to the last
    document of `docs` [B, T], zero elsewhere: what the next call, or the next device, convolves with."""
    last = value_docs[:, -(width - 1):] == docs[:, -1:]
    return jnp.where(last[..., None], values[:, -(width - 1):], jnp.zeros((), values.dtype))


def _split(conv, axes, x, segment_ids, tail, kernel, bias):
    """`conv` under `shard_map` over every axis of the current mesh, T split over `axes.context` (rows and channels
    as `ccq_jax.ops.sharding.local` splits batch and heads); the new tail is the last device's."""
    mesh, axis = sharding.split_mesh(axes), axes.context
    rows, channels = sharding.splits(mesh, axes, x.shape[0], x.shape[2])

    def body(x, segment_ids, tail, kernel, bias):
        y, new_tail = conv(x, segment_ids, tail, kernel, context_axis=axis, bias=bias)
        return y, new_tail[None]

    ids = P(rows, axis) if segment_ids is not None else None
    in_specs = (P(rows, axis, channels), ids, P(rows, None, channels), P(None, channels),
                P(channels) if bias is not None else None)
    sharded = sharding.manual(body, mesh, in_specs, (P(rows, axis, channels), P(axis, rows, None, channels)))
    y, tails = sharded(x, segment_ids, tail, kernel, bias)
    return y, tails[-1]


@functools.partial(jax.checkpoint, static_argnums=(4,))
def causal_conv_silu(ext, ext_docs, docs, kernel, dtype, bias=None):
    """silu(bias + sum_i kernel[i] * ext[t + i]) in fp32, returned in `dtype`: ext [B, W-1+T, C] (the tail, then x),
    taps from another document than `docs` [B, T] counting as zero; bias [C] or None (none). Recomputed in the
    backward pass from ext: autodiff would otherwise keep an fp32 copy of every tap (fla's causal_conv1d keeps the
    input alone)."""
    t = docs.shape[1]
    kernel = kernel.astype(jnp.float32)
    acc = jnp.zeros((ext.shape[0], t, ext.shape[2]), jnp.float32)
    if bias is not None:
        acc = acc + bias.astype(jnp.float32)
    for i in range(kernel.shape[0]):
        same = (ext_docs[:, i:i + t] == docs)[..., None]
        acc = acc + jnp.where(same, ext[:, i:i + t].astype(jnp.float32), 0.0) * kernel[i]
    return jax.nn.silu(acc).astype(dtype)
