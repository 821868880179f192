"""Jit-compiled prefill, decoding (one step, or a loop) and batched generation for any `CausalLM`.

All of them run the model's one forward (`model(ids, segment_ids, cache=...)`): prefill with
the chunked kernels (`kernel.impl`), decoding one token per row with `kernel.decode_impl` (the
recurrent form by default). The model enters each compiled function as its graph (a static
`GraphKey`) and its state, so the compiled step is reused for every call with the same shapes; each
function takes the module or, to skip splitting it (and hashing its graph) on every call, its
`SplitModel` (`ccq_jax.inference.split`).

`generate` takes right-padded prompts `prompt_ids [B, P]` with `prompt_lengths [B]` (default:
all P). Inside, each row is shifted to end at column P (left padding); the padding forms its
own document (segment id 0 vs 1), so it never reaches the prompt's state, statistics, conv
tails or attention, and every row decodes in lockstep from the same cache slot.

Decoding a single row on a GPU runs two (`decode_rows`; `rows=` overrides it): XLA's GPU compiler
rewrites a one-row product with an [in, out] weight of under 10M multiply-adds into a multiply,
which it writes to memory whole, and a reduction that reads it back, so such weights are read
three times. Compiled for an H200 (`benchmarks/inference_kernels.py`), gla-1.3b's decode step touches
4.15 GB in 483 kernels at one row and 3.06 GB in 386 at two; gdn-1.3b's 5.30 GB / 612 and
3.20 GB / 359. The added row repeats the first, counts as stopped and is dropped from the results;
sampling draws each row from its own key, so it does not change the first row's tokens.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.inference.cache import layer_caches
from ccq_jax.inference.sampling import Sampling
from ccq_jax.inference.split import graph_key, split_model
from ccq_jax.models import check_token_ids, lm_logits
from ccq_jax import checks as check


def _last_logits(model, input_ids, segment_ids, cache):
    """(logits [B, 1, vocab] of the last position only, cache): the LM head skips every other position."""
    x, cache = model.hidden_states(input_ids, segment_ids, cache)
    return lm_logits(x[:, -1:], model.head(), model.config.compute_dtype), cache


@functools.partial(jax.jit, static_argnums=0, static_argnames="last_only")
def _prefill(graph, state, input_ids, segment_ids, cache, *, last_only):
    model = nnx.merge(graph.graphdef, state)
    if last_only:
        return _last_logits(model, input_ids, segment_ids, cache)
    return model(input_ids, segment_ids, cache)


def decode_rows(batch: int, platform: str) -> int:
    """Rows a compiled decode step runs for `batch` rows on `platform` (`jax.default_backend()`): two for a single
    row on a GPU (see the module docstring), else `batch`."""
    return 2 if batch == 1 and platform == "gpu" else batch


def _rows(rows, batch: int) -> int:
    if rows is None:
        return decode_rows(batch, jax.default_backend())
    check.integer("rows", rows, minimum=batch)
    return int(rows)


def _grow(tree, rows: int):
    """Every leaf with a batch axis (all but a KV cache's scalar index) grown to `rows` rows repeating row 0."""

    def grow(x):
        if x.ndim == 0 or x.shape[0] == rows:
            return x
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (rows - x.shape[0], *x.shape[1:]))])

    return jax.tree.map(grow, tree)


def _first_rows(tree, batch: int):
    """The first `batch` rows of every leaf with a batch axis: `_grow` undone."""
    return jax.tree.map(lambda x: x if x.ndim == 0 else x[:batch], tree)


def _stopped_beyond(done, rows: int):
    """`done` [B] grown to `rows`: the added rows count as stopped, so they never hold the loop."""
    return jnp.concatenate([done, jnp.ones((rows - done.shape[0],), bool)])


@functools.partial(jax.jit, static_argnums=0, static_argnames="rows")
def _decode(graph, state, tokens, cache, *, rows):
    logits, cache = nnx.merge(graph.graphdef, state)(_grow(tokens, rows)[:, None], None, _grow(cache, rows))
    return _first_rows((logits[:, 0], cache), tokens.shape[0])


def prefill(model, input_ids: jax.Array, cache: tuple, segment_ids: jax.Array | None = None, *,
            last_only: bool = False):
    """Run a prompt `input_ids [B, T]` through the model from `cache`. Returns (logits [B, T, vocab], cache), or
    with `last_only` the last position's logits [B, 1, vocab] (what generation reads; the LM head then reads one
    position instead of T)."""
    served = split_model(model)
    return _prefill(graph_key(served), served.state, jnp.asarray(input_ids), segment_ids, cache,
                    last_only=bool(last_only))


def _vocab_size(served) -> int:
    return served.state["embeddings"]["embedding"].shape[0]


def _check_tokens(tokens, served):
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 1 or not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(f"tokens: expected integer token ids [B], got {tokens.dtype} {tuple(tokens.shape)}")
    check_token_ids("tokens", tokens, _vocab_size(served))
    return tokens


def decode_step(model, tokens: jax.Array, cache: tuple, *, rows: int | None = None):
    """One token per row, `tokens [B]` -> (logits [B, vocab], cache): one compiled step of `rows` rows (default
    `decode_rows`; rows beyond B repeat the first and are dropped)."""
    served = split_model(model)
    tokens = _check_tokens(tokens, served)
    return _decode(graph_key(served), served.state, tokens, cache, rows=_rows(rows, tokens.shape[0]))


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


@functools.partial(jax.jit, static_argnames=("graph", "num_tokens", "sampling", "rows"))
def _decode_many(graph, state, tokens, cache, rng, *, num_tokens, sampling, rows):
    keys = jax.random.split(rng, num_tokens)
    done = _stopped_beyond(jnp.zeros(tokens.shape, bool), rows)
    out = _sample_loop(nnx.merge(graph.graphdef, state), _grow(tokens, rows), _grow(cache, rows), keys, sampling, done)
    return _first_rows(out, tokens.shape[0])


@functools.partial(jax.jit, static_argnames=("graph", "max_new_tokens", "sampling", "rows"))
def _generate(graph, state, prompt_ids, lengths, rng, *, max_new_tokens, sampling, rows):
    model = nnx.merge(graph.graphdef, state)
    b, p = prompt_ids.shape
    ids, segments = _left_align(prompt_ids, lengths)
    logits, cache = _last_logits(model, ids, segments, layer_caches(model, b, p + max_new_tokens))
    keys = jax.random.split(rng, max_new_tokens)
    first, done = sampling.stop(sampling.pick(logits[:, 0], keys[0]), jnp.zeros((b,), bool))
    rest, _ = _sample_loop(model, _grow(first, rows), _grow(cache, rows), keys[1:], sampling,
                           _stopped_beyond(done, rows))
    return jnp.concatenate([first[:, None], rest[:b]], axis=1)


def _sampling(temperature, top_p, top_k, eos_id, rng):
    sampling = Sampling(temperature, top_p, top_k, eos_id)
    if sampling.temperature > 0 and rng is None:
        raise ValueError("rng: a jax.random key is required when temperature > 0")
    return sampling, jax.random.key(0) if rng is None else rng


def decode(model, tokens, cache: tuple, num_tokens: int, temperature: float = 0.0, top_p: float = 1.0, rng=None,
           *, top_k: int = 0, eos_id: int | None = None, rows: int | None = None):
    """Continue from `cache`: feed `tokens [B]` and sample `num_tokens` new tokens per row in one compiled loop.

    Returns (new tokens [B, num_tokens], cache); the cache has seen `tokens` and all new tokens
    but the last (with `eos_id`, those up to where every row had stopped). Sampling and `rows` as in `generate`.
    """
    served = split_model(model)
    tokens = _check_tokens(tokens, served)
    check.integer("num_tokens", num_tokens, minimum=1)
    sampling, rng = _sampling(temperature, top_p, top_k, eos_id, rng)
    return _decode_many(graph_key(served), served.state, tokens, cache, rng, num_tokens=int(num_tokens),
                        sampling=sampling, rows=_rows(rows, tokens.shape[0]))


def generate(model, prompt_ids, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0, rng=None, *,
             prompt_lengths=None, top_k: int = 0, eos_id: int | None = None, rows: int | None = None) -> jax.Array:
    """Prefill then decode `max_new_tokens` tokens per row. Returns the new tokens [B, max_new_tokens] (int32).

    prompt_ids: [B, P] right-padded, ids in [0, vocab_size) (checked when concrete; under jit nothing checks them);
    prompt_lengths: [B] in [1, P] (default P for every row).
    temperature 0 is greedy; otherwise sampling at `temperature` from the top-k tokens (top_k 0: all) and
    then the top-p nucleus, with `rng` (a jax.random key) required. eos_id: each row stops after emitting
    it (the rest of the row holds eos_id), and decoding ends once every row has stopped. rows: the rows each decode
    step runs (default `decode_rows(B, backend)`; added rows repeat the first and are dropped).
    """
    prompt_ids = jnp.asarray(prompt_ids)
    if prompt_ids.ndim != 2 or not jnp.issubdtype(prompt_ids.dtype, jnp.integer) or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids: expected integer ids [B, P] with P >= 1, got {prompt_ids.dtype} "
                         f"{tuple(prompt_ids.shape)}")
    b, p = prompt_ids.shape
    check.integer("max_new_tokens", max_new_tokens, minimum=1)
    sampling, rng = _sampling(temperature, top_p, top_k, eos_id, rng)
    lengths = _lengths(prompt_lengths, b, p)
    served = split_model(model)
    if not isinstance(prompt_ids, jax.core.Tracer) and not isinstance(lengths, jax.core.Tracer):
        prompt = np.arange(p)[None, :] < np.asarray(lengths)[:, None]  # the padding after each prompt is not read
        check_token_ids("prompt_ids", np.asarray(prompt_ids)[prompt], _vocab_size(served))
    return _generate(graph_key(served), served.state, prompt_ids, lengths, rng, max_new_tokens=int(max_new_tokens),
                     sampling=sampling, rows=_rows(rows, b))


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
