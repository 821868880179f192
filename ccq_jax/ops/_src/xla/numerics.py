"""Small numerical helpers shared by every form of the ops (recurrent, chunk, scan and the kernels' wrappers)."""

import jax
import jax.numpy as jnp

L2_NORM_EPS = 1e-6
HIGHEST = jax.lax.Precision.HIGHEST


def varying_axes(tree) -> frozenset:
    """The manual mesh axes (inside `jax.shard_map`) that any array of `tree` varies over; empty outside it."""
    return frozenset().union(*(jax.typeof(a).mat.varying for a in jax.tree.leaves(tree)))


def vary_like(tree, *refs):
    """`tree` with every leaf cast to vary over the manual mesh axes (inside `jax.shard_map`) that any of `refs`
    varies over; outside shard_map, or where it already does, the leaves are returned as they are. A scan's
    initial carry (zeros, or a state shared by all shards) must vary like the values its body computes."""
    axes = varying_axes(refs)

    def cast(x):
        missing = tuple(sorted(axes - jax.typeof(x).mat.varying))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree) if axes else tree


def accum_dtype(*xs: jax.Array) -> jnp.dtype:
    """fp32, or fp64 when an input is fp64 (x64 runs of the ground truth)."""
    return jnp.result_type(jnp.float32, *[x.dtype for x in xs])


def l2_inverse_norm(k: jax.Array) -> jax.Array:
    """1 / sqrt(||k||^2 + eps) along the last axis, kept as [..., 1], in k's dtype: `l2_normalize`'s factor."""
    return jax.lax.rsqrt(jnp.sum(k * k, axis=-1, keepdims=True) + L2_NORM_EPS)


def l2_normalize(k: jax.Array) -> jax.Array:
    """k / sqrt(||k||^2 + eps) along the last axis, in k's dtype (fla's l2norm convention)."""
    return k * l2_inverse_norm(k)


def ccq_keys(k: jax.Array, normalize_keys: bool) -> jax.Array:
    """The keys the CCQ statistics are built from, in fp32 (or fp64)."""
    k = k.astype(accum_dtype(k))
    return l2_normalize(k) if normalize_keys else k


def ccq_correction(sigma_num_q, key_sum, count, q, centered: bool):
    """Sigma_t q_t from C_t q_t, m_t and n_t (count broadcast over the last axis).

    Sigma_t q = C_t q / n_t - (m_t / n_t)(m_t / n_t)^T q   (second term only when centered).
    """
    n = count[..., None]
    out = sigma_num_q / n
    if centered:
        mean = key_sum / n
        out = out - mean * jnp.sum(mean * q, axis=-1, keepdims=True)
    return out


def doc_ids(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """Monotone document index [B, T] (int32): 0 at t=0, +1 wherever segment_ids changes.

    A repeated id after a different one still starts a new document, so two positions belong
    to the same document exactly when their document indices are equal.
    """
    if segment_ids is None:
        return jnp.zeros((batch, length), jnp.int32)
    changed = segment_ids[:, 1:] != segment_ids[:, :-1]
    return jnp.concatenate(
        [jnp.zeros((batch, 1), jnp.int32), jnp.cumsum(changed, axis=1, dtype=jnp.int32)], axis=1
    )


def resets(docs: jax.Array) -> jax.Array:
    """[B, T] bool: True where a new document starts (never at t=0: the initial state is kept there)."""
    return jnp.concatenate([jnp.zeros_like(docs[:, :1], bool), docs[:, 1:] != docs[:, :-1]], axis=1)


def time_major(*xs):
    """[B, T, ...] -> [T, B, ...] for each of xs (the recurrences scan over T)."""
    return [jnp.moveaxis(x, 1, 0) for x in xs]


def zero_where(reset_t, state):
    """Zero each batch row of `state` whose token starts a new document."""
    return jnp.where(reset_t.reshape((-1,) + (1,) * (state.ndim - 1)), 0, state)
