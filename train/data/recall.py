"""Recall accuracy on scored positions (MQAR, needle), in pure jax.numpy so train and eval share it.

A position counts when `batch["loss_mask"]` is non-zero; it is correct when the argmax of the
logits equals `batch["targets"]` there (teacher forcing: for a multi-token needle value every
value token is scored given the true previous ones). Works under `jax.jit`; sum the counts
over batches (and hosts) before dividing.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp


def recall_counts(logits: jnp.ndarray, batch: Mapping[str, jnp.ndarray]) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(correct, scored) fp32 scalars for logits [B, T, E] and a batch with targets/loss_mask [B, T]."""
    if logits.shape[:-1] != batch["targets"].shape:
        raise ValueError(
            f"logits: expected shape [B, T, E] with [B, T] = targets.shape {tuple(batch['targets'].shape)}, "
            f"got {tuple(logits.shape)}"
        )
    scored = jnp.asarray(batch["loss_mask"]) != 0
    correct = (jnp.argmax(logits, axis=-1) == batch["targets"]) & scored
    return jnp.sum(correct, dtype=jnp.float32), jnp.sum(scored, dtype=jnp.float32)


def recall_accuracy(logits: jnp.ndarray, batch: Mapping[str, jnp.ndarray]) -> jnp.ndarray:
    """Fraction of scored positions predicted correctly (0 when nothing is scored)."""
    correct, scored = recall_counts(logits, batch)
    return correct / jnp.maximum(scored, 1.0)
