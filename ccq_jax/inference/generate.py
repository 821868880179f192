"""Jit-compiled prefill, decoding (one step, or a loop) and batched generation for any `CausalLM`.

All of them run the model's one forward (`model(ids, segment_ids, cache=...)`): prefill with
the chunked kernels (`attn_impl`), decoding one token per row with `decode_impl` (the
recurrent form by default). The model enters each compiled function as (graphdef, state), so
the compiled step is reused for every call with the same shapes; each function takes the module
or, to skip splitting it on every call, its `SplitModel` (`ccq_jax.inference.split`).

`generate` takes right-padded prompts `prompt_ids [B, P]` with `prompt_lengths [B]` (default:
all P). Inside, each row is shifted to end at column P (left padding); the padding forms its
own document (segment id 0 vs 1), so it never reaches the prompt's state, statistics, conv
tails or attention, and every row decodes in lockstep from the same cache slot.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.inference.cache import layer_caches
from ccq_jax.inference.sampling import Sampling
from ccq_jax.inference.split import split_model
from ccq_jax.models import lm_logits
from ccq_jax import checks as check


def _last_logits(model, input_ids, segment_ids, cache):
    """(logits [B, 1, vocab] of the last position only, cache): the LM head skips every other position."""
    x, cache = model.hidden_states(input_ids, segment_ids, cache)
    return lm_logits(x[:, -1:], model.head(), model.config.compute_dtype), cache


@functools.partial(jax.jit, static_argnums=0, static_argnames="last_only")
def _prefill(graphdef, state, input_ids, segment_ids, cache, *, last_only):
    model = nnx.merge(graphdef, state)
    if last_only:
        return _last_logits(model, input_ids, segment_ids, cache)
    return model(input_ids, segment_ids, cache)


@functools.partial(jax.jit, static_argnums=0)
def _decode(graphdef, state, tokens, cache):
    logits, cache = nnx.merge(graphdef, state)(tokens[:, None], None, cache)
    return logits[:, 0], cache


def prefill(model, input_ids: jax.Array, cache: tuple, segment_ids: jax.Array | None = None, *,
            last_only: bool = False):
    """Run a prompt `input_ids [B, T]` through the model from `cache`. Returns (logits [B, T, vocab], cache), or
    with `last_only` the last position's logits [B, 1, vocab] (what generation reads; the LM head then reads one
    position instead of T)."""
    graphdef, state = split_model(model)
    return _prefill(graphdef, state, jnp.asarray(input_ids), segment_ids, cache, last_only=bool(last_only))


def _check_tokens(tokens):
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 1 or not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(f"tokens: expected integer token ids [B], got {tokens.dtype} {tuple(tokens.shape)}")
    return tokens


def decode_step(model, tokens: jax.Array, cache: tuple):
    """One token per row, `tokens [B]` -> (logits [B, vocab], cache): one compiled step."""
    tokens = _check_tokens(tokens)
    graphdef, state = split_model(model)
    return _decode(graphdef, state, tokens, cache)


def _left_align(prompt_ids, lengths):
    """Right-padded [B, P] -> (left-padded ids, segment ids: 0 on padding, 1 on the prompt)."""
    p = prompt_ids.shape[1]
    src = jnp.arange(p)[None, :] - (p - lengths)[:, None]
    ids = jnp.take_along_axis(prompt_ids, jnp.clip(src, 0, p - 1), axis=1)
    real = src >= 0
    return jnp.where(real, ids, 0), real.astype(jnp.int32)


def _sample_loop(model, token, cache, keys, sampling: Sampling, done):
    """Feed `token` [B], pick the next, repeat once per key until every row is `done`. Returns (new tokens
    [B, len(keys)], cache); positions after the loop ends early hold the eos id."""
    n = keys.shape[0]

    def step(carry):
        i, token, cache, done, out = carry
        logits, cache = model(token[:, None], None, cache)
        token, done = sampling.stop(sampling.pick(logits[:, 0], keys[i]), done)
        return i + 1, token, cache, done, jax.lax.dynamic_update_slice(out, token[:, None], (0, i))

    out = jnp.full((token.shape[0], n), sampling.eos_id or 0, jnp.int32)
    carry = (jnp.int32(0), token, cache, done, out)
    _, _, cache, _, out = jax.lax.while_loop(lambda c: (c[0] < n) & ~jnp.all(c[3]), step, carry)
    return out, cache


@functools.partial(jax.jit, static_argnames=("graphdef", "num_tokens", "sampling"))
def _decode_many(graphdef, state, tokens, cache, rng, *, num_tokens, sampling):
    keys = jax.random.split(rng, num_tokens)
    done = jnp.zeros(tokens.shape, bool)
    return _sample_loop(nnx.merge(graphdef, state), tokens, cache, keys, sampling, done)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "sampling"))
def _generate(graphdef, state, prompt_ids, lengths, rng, *, max_new_tokens, sampling):
    model = nnx.merge(graphdef, state)
    b, p = prompt_ids.shape
    ids, segments = _left_align(prompt_ids, lengths)
    logits, cache = _last_logits(model, ids, segments, layer_caches(model, b, p + max_new_tokens))
    keys = jax.random.split(rng, max_new_tokens)
    first, done = sampling.stop(sampling.pick(logits[:, 0], keys[0]), jnp.zeros((b,), bool))
    rest, _ = _sample_loop(model, first, cache, keys[1:], sampling, done)
    return jnp.concatenate([first[:, None], rest], axis=1)


def _sampling(temperature, top_p, top_k, eos_id, rng):
    sampling = Sampling(temperature, top_p, top_k, eos_id)
    if sampling.temperature > 0 and rng is None:
        raise ValueError("rng: a jax.random key is required when temperature > 0")
    return sampling, jax.random.key(0) if rng is None else rng


def decode(model, tokens, cache: tuple, num_tokens: int, temperature: float = 0.0, top_p: float = 1.0, rng=None,
           *, top_k: int = 0, eos_id: int | None = None):
    """Continue from `cache`: feed `tokens [B]` and sample `num_tokens` new tokens per row in one compiled loop.

    Returns (new tokens [B, num_tokens], cache); the cache has seen `tokens` and all new tokens
    but the last (with `eos_id`, those up to where every row had stopped). Sampling as in `generate`.
    """
    tokens = _check_tokens(tokens)
    check.integer("num_tokens", num_tokens, minimum=1)
    sampling, rng = _sampling(temperature, top_p, top_k, eos_id, rng)
    graphdef, state = split_model(model)
    return _decode_many(graphdef, state, tokens, cache, rng, num_tokens=int(num_tokens), sampling=sampling)


def generate(model, prompt_ids, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0, rng=None, *,
             prompt_lengths=None, top_k: int = 0, eos_id: int | None = None) -> jax.Array:
    """Prefill then decode `max_new_tokens` tokens per row. Returns the new tokens [B, max_new_tokens] (int32).

    prompt_ids: [B, P] right-padded; prompt_lengths: [B] in [1, P] (default P for every row).
    temperature 0 is greedy; otherwise sampling at `temperature` from the top-k tokens (top_k 0: all) and
    then the top-p nucleus, with `rng` (a jax.random key) required. eos_id: each row stops after emitting
    it (the rest of the row holds eos_id), and decoding ends once every row has stopped.
    """
    prompt_ids = jnp.asarray(prompt_ids)
    if prompt_ids.ndim != 2 or not jnp.issubdtype(prompt_ids.dtype, jnp.integer) or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids: expected integer ids [B, P] with P >= 1, got {prompt_ids.dtype} "
                         f"{tuple(prompt_ids.shape)}")
    b, p = prompt_ids.shape
    check.integer("max_new_tokens", max_new_tokens, minimum=1)
    sampling, rng = _sampling(temperature, top_p, top_k, eos_id, rng)
    lengths = _lengths(prompt_lengths, b, p)
    graphdef, state = split_model(model)
    return _generate(graphdef, state, prompt_ids, lengths, rng, max_new_tokens=int(max_new_tokens),
                     sampling=sampling)


def _lengths(prompt_lengths, b, p):
    if prompt_lengths is None:
        return jnp.full((b,), p, jnp.int32)
    lengths = jnp.asarray(prompt_lengths)
    if lengths.shape != (b,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise ValueError(f"prompt_lengths: expected integers [B={b}], got {lengths.dtype} {tuple(lengths.shape)}")
    if not isinstance(lengths, jax.core.Tracer):
        values = np.asarray(lengths)
        if values.min() < 1 or values.max() > p:
            raise ValueError(f"prompt_lengths: expected values in [1, P={p}], got {values.tolist()}")
    return lengths.astype(jnp.int32)
