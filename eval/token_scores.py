"""Log-probabilities of target tokens under a model's logits, shared by perplexity and lm-eval."""

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def _scores(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
    logp = jax.nn.log_softmax(logits, axis=-1)
    target_logp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return target_logp, jnp.argmax(logits, axis=-1) == targets


def target_logprobs(logits, targets) -> tuple[np.ndarray, np.ndarray]:
    """log p(targets[b, t] | logits[b, t]) in fp32 (fp64 for fp64 logits) and whether it is the argmax.

    logits: [B, T, E]; targets: [B, T] integers in [0, E). Returns two [B, T] NumPy arrays.
    """
    logits = jnp.asarray(logits)
    ids = np.asarray(targets)
    targets = jnp.asarray(ids, jnp.int32)
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits: expected [B, T, E] matching targets [B, T]; got logits {logits.shape}, targets {targets.shape}"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= logits.shape[-1]):  # out of range: a NaN or a wrapped index
        raise ValueError(
            f"targets: expected token ids in [0, {logits.shape[-1]}) (E, the logits' last dimension), "
            f"got ids from {ids.min()} to {ids.max()}"
        )
    logp, greedy = _scores(logits, targets)
    return np.asarray(logp), np.asarray(greedy)
