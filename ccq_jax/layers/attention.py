"""Softmax attention with RoPE (fla's `Attention` layer), the Transformer baseline's mixer.

q, k, v projections (`num_kv_heads < num_heads`: grouped-query attention), rotary embeddings
(GPT-NeoX half rotation, `rope_theta`), `jax.nn.dot_product_attention` (cuDNN flash attention
on GPUs when `sdpa_impl="cudnn"` or chosen automatically), `o_proj`. Positions restart at 0
in every document of a packed row, and tokens attend only within their document.

With a `KVCache` the new keys and values are written at slot `cache.index` and the queries
attend over every filled slot of their document; the first document of the call continues
the cached one (its positions continue from `cache.position`).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax import checks as check
from ccq_jax.layers.cache import KVCache
from ccq_jax.layers.params import linear
from ccq_jax.layers.shapes import split_heads
from ccq_jax.ops import doc_ids


def attention_head_dim(hidden_size, num_heads, num_kv_heads=None) -> int:
    """Validate the Transformer's sizes (ValueError naming the field); returns D / H."""
    check.integer("hidden_size", hidden_size, minimum=1)
    check.integer("num_heads", num_heads, minimum=1)
    check.integer("num_kv_heads", num_kv_heads, minimum=1, optional=True)
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size: must be divisible by num_heads = {num_heads}, got {hidden_size}")
    if num_kv_heads is not None and num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads: must divide num_heads = {num_heads}, got {num_kv_heads}")
    head_dim = hidden_size // num_heads
    if head_dim % 2:
        raise ValueError(f"hidden_size: hidden_size / num_heads = {head_dim} must be even for RoPE")
    return head_dim


def rotary(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """RoPE on x [B, T, H, D] at integer positions [B, T]: rotate (x[:D/2], x[D/2:]) pairs, fp32 angles."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[..., None, None] * inv_freq  # [B, T, 1, D/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _doc_positions(docs):
    """Position of each token within its document (0 at every document start)."""
    t = jnp.arange(docs.shape[1])
    starts = jnp.concatenate([jnp.ones_like(docs[:, :1], bool), docs[:, 1:] != docs[:, :-1]], axis=1)
    return t - jax.lax.cummax(jnp.where(starts, t, 0), axis=1)


class Attention(nnx.Module):
    def __init__(self, hidden_size: int, *, num_heads: int = 32, num_kv_heads: int | None = None,
                 rope_theta: float = 10000.0, sdpa_impl: str | None = None, initializer_range: float = 0.02,
                 dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs):
        self.head_dim = attention_head_dim(hidden_size, num_heads, num_kv_heads)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.rope_theta, self.sdpa_impl = rope_theta, sdpa_impl
        self.dtype, self.param_dtype = dtype, param_dtype
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        kv_dim = self.num_kv_heads * self.head_dim
        self.q_proj = linear(hidden_size, hidden_size, ("embed", "heads"), **kw)
        self.k_proj = linear(hidden_size, kv_dim, ("embed", "heads"), **kw)
        self.v_proj = linear(hidden_size, kv_dim, ("embed", "heads"), **kw)
        self.o_proj = linear(hidden_size, hidden_size, ("heads", "embed"), **kw)

    def init_cache(self, batch_size: int, max_length: int) -> KVCache:
        check.integer("max_length", max_length, minimum=1)
        dtype = jnp.dtype(self.dtype or self.param_dtype)
        kv = jnp.zeros((batch_size, max_length, self.num_kv_heads, self.head_dim), dtype)
        zeros = jnp.zeros((batch_size,), jnp.int32)
        return KVCache(kv, kv, jnp.full((batch_size, max_length), -1, jnp.int32), jnp.zeros((), jnp.int32),
                       zeros, zeros)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache: KVCache | None = None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        b, t, _ = x.shape
        q, k, v = (split_heads(p(x), self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
        docs = doc_ids(segment_ids, b, t)
        positions = _doc_positions(docs)
        mask, new_cache = None, None
        if cache is not None:
            positions = jnp.where(docs == 0, cache.position[:, None] + jnp.arange(t), positions)
            docs = cache.doc[:, None] + docs
        q, k = rotary(q, positions, self.rope_theta), rotary(k, positions, self.rope_theta)
        if cache is not None:
            at = (0, cache.index, 0, 0)
            k = jax.lax.dynamic_update_slice(cache.key, k.astype(cache.key.dtype), at)
            v = jax.lax.dynamic_update_slice(cache.value, v.astype(cache.value.dtype), at)
            slot_doc = jax.lax.dynamic_update_slice(cache.slot_doc, docs.astype(jnp.int32), (0, cache.index))
            query_slot = cache.index + jnp.arange(t)
            causal = jnp.arange(k.shape[1])[None, :] <= query_slot[:, None]  # [T, S]
            mask = (causal & (slot_doc[:, None, :] == docs[:, :, None]))[:, None]  # [B, 1, T, S]
            new_cache = KVCache(k, v, slot_doc, cache.index + t, positions[:, -1] + 1, docs[:, -1])
        elif segment_ids is not None:
            mask = (jnp.tril(jnp.ones((t, t), bool)) & (docs[:, :, None] == docs[:, None, :]))[:, None]
        o = jax.nn.dot_product_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask=mask,
                                         is_causal=mask is None, implementation=self.sdpa_impl)
        return self.o_proj(o.reshape(b, t, -1)), new_cache
