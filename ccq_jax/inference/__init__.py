"""Inference: decoding caches, jit-compiled prefill / single-token decode, and batched generation.

    cache = init_cache(model, batch_size, max_length)
    logits, cache = prefill(model, prompt_ids, cache)           # chunked kernels
    logits, cache = decode_step(model, next_tokens, cache)      # one token per row, recurrent kernels
    new_tokens, cache = decode(model, next_tokens, cache, 32)   # a compiled loop of 32 such steps
    new_tokens = generate(model, prompt_ids, 32, prompt_lengths=lengths)

Each takes the model or its `split_model(model)`, which skips re-splitting the model on every call.

Linear-attention models decode in constant memory per token (the cache does not grow); a hybrid's attention layers
keep KV caches beside them (`cache_bytes_per_sequence(model, max_length)` reports both).
"""

from ccq_jax.inference.cache import cache_bytes_per_sequence, cache_nbytes, init_cache
from ccq_jax.inference.generate import decode, decode_rows, decode_step, generate, prefill
from ccq_jax.inference.sampling import sample_next
from ccq_jax.inference.split import GraphKey, SplitModel, graph_key, split_model

__all__ = ["GraphKey", "SplitModel", "cache_bytes_per_sequence", "cache_nbytes", "decode", "decode_rows",
           "decode_step", "generate", "graph_key", "init_cache", "prefill", "sample_next", "split_model"]
