"""The language-model loss from final hidden states, the LM head applied a slice of positions at a time.

`loss_sums` returns the masked next-token NLL summed over the batch, the number of scored
tokens and the recall counts (`train.data.recall`). With `chunk_len` > 0 the positions are cut
into slices of that length and a `lax.scan` runs the head and the cross-entropy on one slice at
a time under `jax.checkpoint`: the `[B, T, vocab]` fp32 logits (2 GiB for 16K tokens and a 32K
vocabulary), their softmax and their gradient then exist one slice at a time, for the price of
running the head's forward twice. The batch axis is never split, so its sharding is kept.
"""

import jax
import jax.numpy as jnp
import optax

from ccq_jax.models import lm_logits
from train.data.recall import recall_counts


def _slice_sums(x, head, dtype, targets, loss_mask):
    logits = lm_logits(x, head, dtype)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    mask = loss_mask.astype(jnp.float32)
    correct, scored = recall_counts(logits, {"targets": targets, "loss_mask": loss_mask})
    return jnp.sum(nll * mask), (jnp.sum(mask), correct, scored)


def loss_sums(x, head, dtype, batch, chunk_len: int = 0):
    """(sum of masked NLL, (scored tokens, recall correct, recall scored)) for hidden states x [B, T, D],
    the head [D, vocab] applied in `dtype`, and a batch with `targets` and `loss_mask` [B, T].

    chunk_len: positions per slice of the head and loss (0, or >= T: all at once).
    """
    if chunk_len < 0:
        raise ValueError(f"chunk_len: expected >= 0, got {chunk_len}")
    b, t = batch["targets"].shape
    if not chunk_len or chunk_len >= t:
        return _slice_sums(x, head, dtype, batch["targets"], batch["loss_mask"])
    if dtype is not None:  # once here: inside the scan each slice (and its recompute) would cast [D, vocab] again
        head = head.astype(dtype)
    pad = -t % chunk_len

    def slices(a):  # [B, T, ...] -> [T / chunk_len, B, chunk_len, ...], padded positions unscored
        a = jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2))
        return jnp.moveaxis(a.reshape(b, -1, chunk_len, *a.shape[2:]), 1, 0)

    one = jax.checkpoint(lambda xs, ts, ms: _slice_sums(xs, head, dtype, ts, ms))

    def add(total, xs):
        return jax.tree.map(jnp.add, total, one(*xs)), None

    zero = (jnp.zeros(()), (jnp.zeros(()),) * 3)
    total, _ = jax.lax.scan(add, zero, (slices(x), slices(batch["targets"]), slices(batch["loss_mask"])))
    return total
