"""The decoding cache of a `CausalLM`: a tuple with one cache per layer (`ccq_jax.layers.cache`).

Linear-attention layers hold `RecurrentCache(state [B,H,K,V] fp32, stats CCQStats | None,
conv (q, k, v tails [B, W-1, C]) | None)`, whose size does not depend on the context length;
Transformer layers hold a `KVCache` with `max_length` slots.
"""

import jax
import numpy as np

from ccq_jax import checks as check


def init_cache(model, batch_size: int, max_length: int) -> tuple:
    """An empty cache for `batch_size` rows; `max_length` bounds prompt + generated tokens (KV caches only)."""
    check.integer("batch_size", batch_size, minimum=1)
    check.integer("max_length", max_length, minimum=1)
    return tuple(layer.attn.init_cache(batch_size, max_length) for layer in model.layers)


def cache_nbytes(cache) -> int:
    """Bytes held by a cache (every array leaf)."""
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache))
