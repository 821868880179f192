"""Choosing the next token from logits: greedy (temperature 0) or temperature + top-k + nucleus (top-p) sampling,
and per-row stopping at an end-of-sequence id (`Sampling`)."""

import dataclasses

import jax
import jax.numpy as jnp

from ccq_jax import checks as check


def sample_next(logits: jax.Array, key: jax.Array, temperature: float, top_p: float, top_k: int = 0) -> jax.Array:
    """logits [B, E] -> token ids [B] (int32). temperature, top_p and top_k are Python numbers (static).

    top_k > 0 keeps the k most likely tokens (and tokens tied with the k-th); then top_p < 1 keeps the
    smallest set of most likely tokens whose probability reaches top_p (the most likely token always
    stays; tokens tied with the last kept one stay too). Row r draws with `fold_in(key, r)`, so a row's token does
    not depend on the other rows of the batch (nor on the rows a GPU decode step adds: `ccq_jax.inference.generate`).
    """
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits.astype(jnp.float32) / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits >= kth, logits, -jnp.inf)
    if top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        kept = (jnp.cumsum(probs, axis=-1) - probs) < top_p
        threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits >= threshold, logits, -jnp.inf)
    keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(logits.shape[0]))
    return jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How generation picks tokens and when a row stops (static: one compiled loop per setting).

    temperature 0 is greedy; top_k 0 and top_p 1 keep every token. eos_id: a row stops after it emits this id,
    every later position of that row holds eos_id, and the loop ends early once every row has stopped.
    """
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    eos_id: int | None = None

    def __post_init__(self):
        check.real("temperature", self.temperature, lo=0)
        check.real("top_p", self.top_p, lo=0, hi=1, lo_open=True)
        check.integer("top_k", self.top_k, minimum=0)
        check.integer("eos_id", self.eos_id, minimum=0, optional=True)

    def pick(self, logits: jax.Array, key: jax.Array) -> jax.Array:
        return sample_next(logits, key, self.temperature, self.top_p, self.top_k)

    def stop(self, token: jax.Array, done: jax.Array):
        """(token [B], done [B] bool) -> (token with stopped rows held at eos_id, done after this token)."""
        if self.eos_id is None:
            return token, done
        token = jnp.where(done, self.eos_id, token)
        return token, done | (token == self.eos_id)
