"""The language-model loss from final hidden states, the LM head applied a slice of positions at a time.

`loss_sums` returns the masked next-token NLL summed over the batch, the number of scored
tokens and the recall counts (`train.data.recall`). With `chunk_len` > 0 the positions are cut
into slices of that length and a `lax.scan` runs the head and the cross-entropy on one slice at
a time under `jax.checkpoint`: the `[B, T, vocab]` logits (1 GiB in bf16 for 16K tokens and a
32K vocabulary), their softmax and their gradient then exist one slice at a time, for the price
of running the head's forward twice. The batch axis is never split, so its sharding is kept.

A batch that names its scored positions (`scored_positions` [B, P], the synthetic tasks' P
recall positions per row) has the head and the loss applied at those positions only: the same
sums as over all T positions, for P / T of the head's work (MQAR at T = 256 with 16 pairs: 1/16).

The logits stay in the head's compute dtype (bf16 in mixed precision) and `cross_entropy` reads
them in fp32 with its own VJP: it keeps the logits and the log-normaliser and forms the gradient
`(softmax - one_hot) * dnll` in one pass, in the logits' dtype, where autodiff of an fp32 softmax
cross-entropy wrote and re-read fp32 intermediates of the logits' size (the same rounding: the
head's product took its gradient in bf16 either way).
"""

import jax
import jax.numpy as jnp

from ccq_jax.models import lm_logits
from train.data.recall import recall_counts


@jax.custom_vjp
def cross_entropy(logits, targets):
    """-log softmax(logits)[targets] in fp32 for logits [..., V] (any float dtype) and integer targets [...]."""
    return _cross_entropy_fwd(logits, targets)[0]


def _cross_entropy_fwd(logits, targets):
    wide = logits.astype(jnp.float32)
    log_norm = jax.nn.logsumexp(wide, axis=-1)
    picked = jnp.take_along_axis(wide, targets[..., None], axis=-1)[..., 0]
    return log_norm - picked, (logits, log_norm, targets)


def _cross_entropy_bwd(residuals, dnll):
    logits, log_norm, targets = residuals
    one_hot = jnp.arange(logits.shape[-1]) == targets[..., None]
    probs = jnp.exp(logits.astype(jnp.float32) - log_norm[..., None])
    dlogits = ((probs - one_hot) * dnll[..., None]).astype(logits.dtype)
    return dlogits, None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def _slice_sums(x, head, dtype, targets, loss_mask):
    logits = lm_logits(x, head, dtype, out_dtype=None)  # in the compute dtype: cross_entropy reads it in fp32
    nll = cross_entropy(logits, targets)
    mask = loss_mask.astype(jnp.float32)
    correct, scored = recall_counts(logits, {"targets": targets, "loss_mask": loss_mask})
    return jnp.sum(nll * mask), (jnp.sum(mask), correct, scored)


def at_scored_positions(x, batch):
    """(x, targets, loss_mask) at the batch's `scored_positions` [B, P] when it has them, else unchanged."""
    if "scored_positions" not in batch:
        return x, batch["targets"], batch["loss_mask"]
    at = batch["scored_positions"]
    if at.ndim != 2 or at.shape[0] != x.shape[0] or not jnp.issubdtype(at.dtype, jnp.integer):
        raise ValueError(f"scored_positions: expected integers [B, P] with B = {x.shape[0]}, "
                         f"got {at.dtype} {tuple(at.shape)}")
    pick = lambda a: jnp.take_along_axis(a, at.reshape(at.shape + (1,) * (a.ndim - 2)), axis=1)
    return pick(x), pick(batch["targets"]), pick(batch["loss_mask"])


def loss_sums(x, head, dtype, batch, chunk_len: int = 0, runs: int = 1):
    """(sum of masked NLL, (scored tokens, recall correct, recall scored)) for hidden states x [B, T, D],
    the head [D, vocab] applied in `dtype`, and a batch with `targets` and `loss_mask` [B, T] (and optionally
    `scored_positions` [B, P]: only those positions are read).

    chunk_len: positions per slice of the head and loss (0, or >= T / runs: all at once). runs: the positions are
    first cut into this many equal runs, each sliced on its own (when it divides T): the devices a sequence is
    split over (`train.sharding.sequence_runs`), so that a slice never spans two of them and each device's
    hidden states stay where they are.
    """
    if chunk_len < 0:
        raise ValueError(f"chunk_len: expected >= 0, got {chunk_len}")
    x, targets, loss_mask = at_scored_positions(x, batch)
    b, t = targets.shape
    runs = runs if t % runs == 0 else 1
    if not chunk_len or chunk_len >= t // runs:
        return _slice_sums(x, head, dtype, targets, loss_mask)
    if dtype is not None:  # once here: inside the scan each slice (and its recompute) would cast [D, vocab] again
        head = head.astype(dtype)
    pad = -(t // runs) % chunk_len

    def slices(a):  # [B, T, ...] -> [T / runs / chunk_len, B * runs, chunk_len, ...], padded positions unscored
        a = a.reshape(b * runs, t // runs, *a.shape[2:])
        a = jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2))
        return jnp.moveaxis(a.reshape(b * runs, -1, chunk_len, *a.shape[2:]), 1, 0)

    one = jax.checkpoint(lambda xs, ts, ms: _slice_sums(xs, head, dtype, ts, ms))

    def add(total, xs):
        return jax.tree.map(jnp.add, total, one(*xs)), None

    zero = (jnp.zeros(()), (jnp.zeros(()),) * 3)
    total, _ = jax.lax.scan(add, zero, (slices(x), slices(targets), slices(loss_mask)))
    return total
