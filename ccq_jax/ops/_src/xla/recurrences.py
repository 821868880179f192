"""The linear recurrence h_t = a_t h_{t-1} + b_t, solved two ways the forms share.

`diagonal_scan` runs it as a log-depth `lax.associative_scan` over the sequence (a_t broadcast
against each leaf of b), with the initial state folded into b_0 (`fold_initial`); `state_pass`
runs it sequentially across chunks, carrying only the fp32 state from one chunk to the next.
The delta rules' chunked forms carry a dense K x K transition instead (`dense_state_pass`),
from their per-chunk `DeltaFactors` (`delta_chunk_pass`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .chunking import mm
from .numerics import HIGHEST, vary_like


def diagonal_scan(a, b):
    """h_t = a_t * h_{t-1} + b_t along axis 1; a: [B, T, ...] broadcast against each leaf of b."""

    def expand(x, leaf):
        return x.reshape(x.shape + (1,) * (leaf.ndim - x.ndim))

    def combine(first, second):
        (a1, b1), (a2, b2) = first, second
        return a1 * a2, jax.tree.map(lambda x1, x2: expand(a2, x1) * x1 + x2, b1, b2)

    return jax.lax.associative_scan(combine, (a, b), axis=1)[1]


def fold_initial(b, a0, init):
    """b_0 += a_0 * h_{-1}: the initial state enters through the first transition."""
    return b.at[:, 0].add(a0.reshape(a0.shape + (1,) * (init.ndim - a0.ndim)) * init)


def state_pass(decay, delta, init):
    """States entering each chunk: S_0 = init, S_{n+1} = decay_n * S_n + delta_n.

    decay: [B, H, N, *] broadcast against every leaf of the pytree `delta` ([B, H, N, ...]);
    init: the same pytree without the N axis. Returns (entering [B, H, N, ...], final).
    """

    def step(state, x):
        d, dl = x
        new = jax.tree.map(lambda s, e: d.reshape(d.shape + (1,) * (s.ndim - d.ndim)) * s + e, state, dl)
        return new, state

    move = lambda x: jnp.moveaxis(x, 2, 0)
    xs = (move(decay), jax.tree.map(move, delta))
    final, entering = jax.lax.scan(step, vary_like(init, xs), xs)
    return jax.tree.map(lambda x: jnp.moveaxis(x, 0, 2), entering), final


def dense_scan(a, b):
    """h_t = a_t @ h_{t-1} + b_t along axis 1 by `lax.associative_scan`: a [B, T, ..., K, K] dense transitions, b
    [B, T, ..., K, V]; returns every h_t."""

    def combine(first, second):
        (a1, b1), (a2, b2) = first, second
        mm = lambda x, y: jnp.einsum("...kl,...lv->...kv", x, y, precision=HIGHEST)
        return mm(a2, a1), mm(a2, b1) + b2

    return jax.lax.associative_scan(combine, (a, b), axis=1)[1]


def dense_state_pass(decay, transition, delta, init):
    """States entering each chunk: S_0 = init, S_{n+1} = decay_n * S_n - transition_n @ S_n + delta_n.

    decay: [B, H, N, ...] broadcast against the state [B, H, K, V] (per head [B, H, N, 1, 1] or per key channel
    [B, H, N, K, 1]); transition: [B, H, N, K, K]; delta: [B, H, N, K, V]; init: [B, H, K, V].
    Returns (entering [B, H, N, K, V], final).
    """

    def step(state, x):
        d, t, dl = x
        new = d * state - jnp.einsum("bhkl,bhlv->bhkv", t, state, precision=HIGHEST) + dl
        return new, state

    move = lambda x: jnp.moveaxis(x, 2, 0)
    xs = (move(decay), move(transition), move(delta))
    final, entering = jax.lax.scan(step, vary_like(init, xs), xs)
    return jnp.moveaxis(entering, 0, 2), final


class DeltaFactors(NamedTuple):
    """What a delta rule's chunkwise form computes inside each chunk, before the state pass ([B, H, N, ...], fp32):
    the state update S' = decay S + k_to_end^T (u_v - w S) and the output o = scale (q_from_start S + scores u)
    with u = u_v - w S, every document mask folded in (docs/design.md, "Gated delta rule")."""

    u_v: jax.Array  # [B, H, N, C, V]
    w: jax.Array  # [B, H, N, C, K]
    k_to_end: jax.Array  # [B, H, N, C, K]
    decay: jax.Array  # [B, H, N] per head, or [B, H, N, K] per key channel (the generalized delta rule)
    q_from_start: jax.Array  # [B, H, N, C, K]
    scores: jax.Array  # [B, H, N, C, C]


def delta_chunk_pass(factors, initial_state, scale, f, dtype):
    """(o [B, H, N, C, V], final state) of `DeltaFactors` from the state entering the first chunk: one
    `dense_state_pass`, then the outputs; products of the state's path in `f`, of the output's in `dtype`."""
    u_v, w, k_to_end, decay, q_from_start, scores = factors
    delta = mm("...ck,...cv->...kv", k_to_end, u_v, f)
    transition = mm("...ck,...cl->...kl", k_to_end, w, f)  # [B, H, N, K, K]
    rows = decay[..., None] if decay.ndim == 4 else decay[..., None, None]

    entering, final = dense_state_pass(rows, transition, delta, initial_state.astype(f))

    u = u_v - mm("...ck,...kv->...cv", w, entering, f)
    o_inter = mm("...ck,...kv->...cv", q_from_start, entering, dtype)
    return scale * (o_inter + mm("...ij,...jv->...iv", scores, u, dtype)), final
