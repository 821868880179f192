"""Reshaping fused projections into heads (the one layout helper the mixers share)."""

import jax


def split_heads(x: jax.Array, head_dim: int) -> jax.Array:
    """[B, T, H*D] -> [B, T, H, D]."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // head_dim, head_dim)
