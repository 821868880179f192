"""Choosing the next token from logits: greedy (temperature 0) or temperature + nucleus (top-p) sampling."""

import jax
import jax.numpy as jnp


def sample_next(logits: jax.Array, key: jax.Array, temperature: float, top_p: float) -> jax.Array:
    """logits [B, E] -> token ids [B] (int32). temperature and top_p are Python floats (static).

    top_p < 1 keeps the smallest set of most likely tokens whose probability reaches top_p
    (the most likely token always stays; tokens tied with the last kept one stay too).
    """
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits.astype(jnp.float32) / temperature
    if top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        kept = (jnp.cumsum(probs, axis=-1) - probs) < top_p
        threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits >= threshold, logits, -jnp.inf)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
