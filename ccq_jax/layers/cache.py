"""Per-layer decoding caches (pytrees of arrays); `ccq_jax.inference.init_cache` builds one per layer.

A linear-attention layer keeps a fixed-size `RecurrentCache` whatever the context length;
softmax `Attention` (the Transformer's, a hybrid's attention layers) keeps a `KVCache` with `max_length` slots, or
with min(window_size, max_length) for a sliding-window layer.
"""

from typing import NamedTuple

import jax

from ccq_jax.ops import CCQStats


class RecurrentCache(NamedTuple):
    """state [B, H, K, V] fp32; stats: CCQ statistics (None when CCQ is off or absent);
    conv: tails of the q, k, v short convolutions, each [B, W-1, C] (None without short convs)."""

    state: jax.Array
    stats: CCQStats | None
    conv: tuple[jax.Array, jax.Array, jax.Array] | None


class KVCache(NamedTuple):
    """key, value [B, S, Hkv, D] (RoPE already applied to keys); slot_doc [B, S]: document of each
    slot (-1 = empty); index: tokens written so far (int32 scalar; the next goes to slot index, or to
    slot index mod S in a sliding-window layer's ring); position [B]: RoPE position of the next token within its document;
    doc [B]: document index of the last token written."""

    key: jax.Array
    value: jax.Array
    slot_doc: jax.Array
    index: jax.Array
    position: jax.Array
    doc: jax.Array
