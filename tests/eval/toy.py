"""Tiny stand-ins for a model and a tokenizer, for the evaluation tests.

`ToyRecurrentLM` is a causal model with a recurrent state: h_t = a * h_{t-1} + emb[x_t],
logits_t = tanh(h_t) @ W. It has a full forward (`logits`), a chunked form carrying h
(`step`/`init_carry`), greedy generation, and a float64 NumPy twin (`logits_np`) for references.
"""

import jax
import jax.numpy as jnp
import numpy as np


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255; EOS is 256."""

    eos_id = 256
    vocab_size = 257

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class ToyRecurrentLM:
    def __init__(self, vocab: int = 257, dim: int = 8, decay: float = 0.8, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.emb = rng.normal(size=(vocab, dim))
        self.w = rng.normal(size=(dim, vocab)) * 2.0
        self.decay = decay
        self.dim = dim
        self._scan = jax.jit(self._scan_impl)

    def _scan_impl(self, ids, h0):
        emb, w = jnp.asarray(self.emb, jnp.float32), jnp.asarray(self.w, jnp.float32)

        def body(h, x):
            h = self.decay * h + emb[x]
            return h, jnp.tanh(h) @ w

        h, logits = jax.lax.scan(body, h0, ids.T)
        return jnp.swapaxes(logits, 0, 1), h

    def init_carry(self, batch: int):
        return jnp.zeros((batch, self.dim), jnp.float32)

    def step(self, ids, carry):
        return self._scan(jnp.asarray(ids, jnp.int32), carry)

    def logits(self, ids):
        ids = jnp.asarray(ids, jnp.int32)
        return self.step(ids, self.init_carry(ids.shape[0]))[0]

    def logits_np(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        h = np.zeros((ids.shape[0], self.dim))
        out = []
        for t in range(ids.shape[1]):
            h = self.decay * h + self.emb[ids[:, t]]
            out.append(np.tanh(h) @ self.w)
        return np.stack(out, axis=1)

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        outs = []
        for p in prompts:
            ids = list(p)
            for _ in range(max_new_tokens):
                ids.append(int(np.argmax(self.logits_np(np.asarray([ids]))[0, -1])))
            outs.append(ids[len(p) :])
        return outs


def log_softmax_np(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
