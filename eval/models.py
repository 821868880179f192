"""Adapters from a `CausalLM` and a `ccq_jax.tokenizers` tokenizer to the evaluation protocols (`eval.protocols`).

    runner = ModelRunner(model, prefix=[tokenizer.bos_id], batch_size=8)
    runner.logits(ids)                          # LogitsFn: one jit-compiled full forward
    runner.init_carry(b); runner.step(ids, c)   # StepFn: `ccq_jax.inference.prefill` chunk by chunk from a cache
    runner.generate(prompts, n)                 # GenerateFn: `ccq_jax.inference.generate`, greedy, batched
    runner.keys(prompts)                        # per prompt, per layer: the keys of the linear-attention reads

`prefix` (e.g. the BOS a model was trained to see at the start of a document) goes in front
of every row: logits and keys come back for the caller's tokens only, a carry starts after
it, and generated tokens follow prompt + nothing else. A linear-attention model's carry is
its recurrent cache (state, CCQ statistics, conv tails), so streaming memory does not grow
with the length; a Transformer's is a KV cache of `max_length` slots.

`generate` and `keys` pad every batch to `batch_size` rows and the width to a bucket (powers
of two up to 1024, then multiples of 1024), and `logits` the width, so a jitted model compiles a few shapes;
rows keep their own lengths (`generate`'s `prompt_lengths`; logits and keys are causal, so right padding
changes nothing before it).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax import checks as check
from ccq_jax.inference import generate, graph_key, init_cache, prefill, split_model
from ccq_jax.layers.recurrent import RecurrentMixer


class TextTokenizer:
    """A `ccq_jax.tokenizers` tokenizer with `encode` returning a list of ints, as the evaluations expect.

    `document_start` is the token a training document begins with (BOS, else EOS, the token
    before any document in a packed stream).
    """

    def __init__(self, tokenizer):
        self.inner = tokenizer
        self.eos_id, self.bos_id, self.vocab_size = tokenizer.eos_id, tokenizer.bos_id, tokenizer.vocab_size

    @property
    def document_start(self) -> int:
        return self.eos_id if self.bos_id is None else self.bos_id

    def encode(self, text: str) -> list[int]:
        return np.asarray(self.inner.encode(text)).tolist()

    def decode(self, ids) -> str:
        return self.inner.decode(ids)


def bucket(n: int) -> int:
    """The padded width for n tokens: the next power of two up to 1024, then the next multiple of 1024."""
    return 1 << max(0, n - 1).bit_length() if n <= 1024 else -(-n // 1024) * 1024


def _right_padded(rows, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Token rows -> (ids [num_rows, bucket(longest row)] right-padded with 0, each row's length), rows past the
    given ones all padding with length 1."""
    ids = np.zeros((num_rows, bucket(max(map(len, rows)))), np.int32)
    lengths = np.ones(num_rows, np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)], lengths[i] = r, len(r)
    return ids, lengths


@functools.partial(jax.jit, static_argnums=0)
def _forward(graph, state, ids):
    return nnx.merge(graph.graphdef, state)(ids)


@functools.partial(jax.jit, static_argnums=0)
def _captured_keys(graph, state, ids):
    _, captured = nnx.capture(nnx.merge(graph.graphdef, state), nnx.Intermediate)(ids)
    return captured


class ModelRunner:
    def __init__(self, model, *, prefix=(), batch_size: int = 1, max_length: int = 4096):
        """max_length: slots of a Transformer's KV cache for `init_carry` (prefix + all tokens stepped through)."""
        check.integer("batch_size", batch_size, minimum=1)
        self.model, self.prefix = model, [int(t) for t in prefix]
        self.batch_size, self.max_length = batch_size, max_length
        self._served = split_model(model)  # split once: every call below reuses it

    def _with_prefix(self, ids) -> np.ndarray:
        ids = np.asarray(ids, np.int32)
        return np.concatenate([np.tile(np.asarray(self.prefix, np.int32), (ids.shape[0], 1)), ids], axis=1)

    def logits(self, ids) -> jax.Array:
        """ids [B, T] -> logits [B, T, E] of one forward over prefix + ids, right-padded to a bucket's width (causal:
        the padding changes no logit before it), so inputs of many lengths compile a few shapes."""
        ids = self._with_prefix(ids)
        padded, _ = _right_padded(ids, len(ids))
        return _forward(graph_key(self._served), self._served.state, padded)[:, len(self.prefix):ids.shape[1]]

    def init_carry(self, batch: int):
        """A cache for `batch` rows that has read the prefix."""
        cache = init_cache(self._served, batch, self.max_length)
        if self.prefix:
            _, cache = prefill(self._served, self._with_prefix(np.zeros((batch, 0), np.int32)), cache)
        return cache

    def step(self, ids, carry):
        """ids [B, C] from `carry` -> (logits [B, C, E], carry)."""
        return prefill(self._served, jnp.asarray(ids, jnp.int32), carry)

    def _padded_batches(self, rows: list[list[int]]):
        """Yield (first row index, ids [batch_size, width] right-padded with 0, lengths [batch_size])."""
        rows = [self.prefix + [int(t) for t in r] for r in rows]
        for first in range(0, len(rows), self.batch_size):
            yield first, *_right_padded(rows[first:first + self.batch_size], self.batch_size)

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuations: `max_new_tokens` new tokens per prompt (the callers cut at EOS)."""
        if any(len(p) == 0 for p in prompts) and not self.prefix:
            raise ValueError("prompts: every prompt needs at least one token when the runner has no prefix")
        out = []
        for first, ids, lengths in self._padded_batches(prompts):
            new = generate(self._served, ids, max_new_tokens, prompt_lengths=lengths)
            out.extend(np.asarray(new)[: min(self.batch_size, len(prompts) - first)].tolist())
        return out

    def keys(self, prompts: list[list[int]]) -> list[list[np.ndarray]]:
        """Per prompt, per layer: the keys `[T, H, K]` the layer's read uses at the prompt's T tokens.

        Raises ValueError for a model with softmax-attention layers (they record no keys): a Transformer, or a
        hybrid (naming its attention layers).
        """
        softmax = [i for i, layer in enumerate(self.model.layers) if not isinstance(layer.attn, RecurrentMixer)]
        family = self.model.config.family
        if len(softmax) == len(self.model.layers):
            raise ValueError(f"model: only linear-attention layers record their keys; this is a {family!r} model")
        if softmax:
            raise ValueError(f"model: only linear-attention layers record their keys; this {family!r} hybrid has "
                             f"softmax attention on layers {softmax}")
        out = []
        for first, ids, _ in self._padded_batches(prompts):
            layers = _captured_keys(graph_key(self._served), self._served.state, ids)["layers"]
            per_layer = [np.asarray(layers[i]["attn"]["keys"][0]) for i in range(len(self.model.layers))]
            for row, prompt in enumerate(prompts[first:first + self.batch_size]):
                start = len(self.prefix)
                out.append([k[row, start:start + len(prompt)] for k in per_layer])
        return out
