"""The decoding cache of a `CausalLM` (or its `SplitModel`): a tuple with one cache per layer
(`ccq_jax.layers.cache`).

Linear-attention layers hold `RecurrentCache(state [B,H,K,V] fp32, stats CCQStats | None,
conv (q, k, v tails [B, W-1, C]) | None)`, whose size does not depend on the context length;
Transformer layers hold a `KVCache` with `max_length` slots. A hybrid's cache is the same tuple: a `KVCache` for each
attention layer (min(window_size, max_length) slots for a windowed one) beside the other layers' `RecurrentCache`s.
`cache_bytes_per_sequence` reports what one sequence's cache holds, by kind of layer.
"""

import functools

import jax
import numpy as np
from flax import nnx

from ccq_jax import checks as check
from ccq_jax.inference.split import SplitModel, graph_key
from ccq_jax.layers.cache import KVCache


def layer_caches(model, batch_size: int, max_length: int) -> tuple:
    """One empty cache per layer of the module `model`."""
    return tuple(layer.attn.init_cache(batch_size, max_length) for layer in model.layers)


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _split_model_cache(graph, state, batch_size, max_length):
    return layer_caches(nnx.merge(graph.graphdef, state), batch_size, max_length)


def init_cache(model, batch_size: int, max_length: int) -> tuple:
    """An empty cache for `batch_size` rows of `model` (a CausalLM or a SplitModel); `max_length` bounds prompt +
    generated tokens (KV caches only)."""
    check.integer("batch_size", batch_size, minimum=1)
    check.integer("max_length", max_length, minimum=1)
    if isinstance(model, SplitModel):
        return _split_model_cache(graph_key(model), model.state, int(batch_size), int(max_length))
    return layer_caches(model, batch_size, max_length)


def cache_nbytes(cache) -> int:
    """Bytes held by a cache (every array leaf)."""
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache))


def cache_bytes_per_sequence(model, max_length: int) -> dict[str, int]:
    """Bytes of one sequence's cache for prompt + generated tokens up to `max_length` (from shapes; nothing is
    allocated): {"attention": the attention layers' KV caches, "recurrent": the other layers' states, statistics and
    conv tails, "total"}; the shared write index is left out."""
    per_layer = jax.eval_shape(lambda: init_cache(model, 1, max_length))
    out = {"attention": 0, "recurrent": 0}
    for layer in per_layer:
        kind = "attention" if isinstance(layer, KVCache) else "recurrent"
        out[kind] += cache_nbytes([x for x in jax.tree.leaves(layer) if x.ndim])
    return {**out, "total": out["attention"] + out["recurrent"]}
