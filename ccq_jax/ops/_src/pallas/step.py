"""One token per row on the step kernels (`pallas_kernels.recurrent_step`): what the Triton backends run when T = 1.

A decode step feeds each row one token. The chunked kernels would pad it to a whole chunk and run their passes;
these run one kernel per op instead (two for a fused CCQ op: the read, then the backbone), reading and writing
the state and the CCQ statistics once. The token's q, k and v enter packed in one array and its gates in another
(the kernels' layout), which XLA forms in one fusion each from whatever produced them. Each op is differentiable
with the gradient of its token-by-token recurrence (`jax.vjp` of the reference at T = 1): a one-token backward is
as small as the step.

The signatures are the reference forms' (`docs` included, and ignored: one token lies in the document the initial
state belongs to), plus `run`, the call's `Launch`, and `recurrent`, the op's token-by-token reference form (the
gradient's), which the op's backend hands in: this module imports no op.
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.recurrent_step import GateLayout, ccq_read_step, state_step

from ..xla.numerics import L2_NORM_EPS, vary_like
from ..xla.types import CCQStats, ReadPolicy
from .layout import pad_state, width

f32 = jnp.float32


def one_token(q) -> bool:
    """Whether a call on q [B, T, H, K] is a decode step (T = 1), which the step kernels take."""
    return q.shape[1] == 1


def _flat(x, to_width=None):
    """[B, 1, H, D] -> [B, H * to_width] (each head zero-padded to `to_width`); [B, 1, H] -> [B, H]."""
    x = x[:, 0]
    if to_width is not None:
        x = jnp.pad(x, [(0, 0), (0, 0), (0, to_width - x.shape[-1])])
    return x.reshape(x.shape[0], -1)


def _packed_gates(g, beta, lam, kp, erase):
    """(gates [B, G] fp32, their `GateLayout`): g first (per channel, each head padded to kp, or per head), then
    beta, then lam, each present one after the last; erase: whether the token carries an erase vector."""
    parts, offsets = [], {}
    per_channel = g is not None and g.ndim == 4
    for name, x, to_width in (("g", g, kp if per_channel else None), ("beta_at", beta, None), ("lam_at", lam, None)):
        if x is not None:
            offsets[name] = sum(p.shape[-1] for p in parts)
            parts.append(_flat(x, to_width).astype(f32))
    layout = GateLayout(per_channel, offsets.get("beta_at"), offsets.get("lam_at"), erase)
    return jnp.concatenate(parts, axis=-1), layout


def _kernels(q, k, v, g, beta, a, lam, h0, stats, *, scale, centered, normalize_keys, run):
    """The step kernels' outputs as the op returns them: (o, state) for a backbone (lam None), (q_clean, stats) for
    the read alone (v None), (o, (state, stats)) for a fused CCQ op; a: the generalized rule's erase vector."""
    dk = q.shape[-1]
    kp = width(dk)
    packed = [x for x in (q, k, v, a) if x is not None]
    widths = [kp, kp] + ([width(v.shape[-1])] if v is not None else []) + ([kp] if a is not None else [])
    dtype = jnp.result_type(*packed)
    tokens = jnp.concatenate([_flat(x.astype(dtype), w) for x, w in zip(packed, widths)], axis=-1)
    gates, layout = _packed_gates(g, beta, lam, kp, erase=a is not None)
    q_clean = None
    if lam is not None:
        pad = [(0, 0), (0, 0), (0, kp - dk)]
        q_clean, cov, key_sum, count = ccq_read_step(
            tokens, gates, jnp.pad(stats.cov.astype(f32), pad + [(0, kp - dk)]),
            jnp.pad(stats.key_sum.astype(f32), pad), stats.count.astype(f32), layout=layout, centered=centered,
            eps=L2_NORM_EPS if normalize_keys else None, out_dtype=q.dtype, **run.kw)
        new_stats = CCQStats(*(x.astype(s.dtype) for x, s in zip((cov[:, :, :dk, :dk], key_sum[..., :dk], count),
                                                                   stats)))
        if v is None:
            return q_clean[:, None, :, :dk], new_stats
    dv = v.shape[-1]
    o, state = state_step(tokens, gates, pad_state(h0, kp, widths[2]), q_clean, layout=layout, scale=scale,
                          out_dtype=v.dtype, **run.kw)
    out = o[:, None, :, :dv], state[:, :, :dk, :dv].astype(h0.dtype)
    return out if lam is None else (out[0], (out[1], new_stats))


def _reference(q, k, v, g, beta, a, lam, h0, stats, *, recurrent, scale, centered, normalize_keys):
    """The same outputs from the op's token-by-token recurrence `recurrent` (`_kernels`' twin, for the gradient; the
    kernels' read is the first-order one)."""
    docs = jnp.zeros(q.shape[:2], jnp.int32)
    gates = tuple(x for x in (g, beta, a) if x is not None)  # GLA's g, the delta rule's (g, beta), or (g, a)
    if lam is None:
        return recurrent(q, k, v, *gates, scale=scale, initial_state=h0, docs=docs)
    if v is None:
        return recurrent(q, k, lam, centered=centered, normalize_keys=normalize_keys, initial_stats=stats, docs=docs,
                         read=ReadPolicy())
    return recurrent(q, k, v, *gates, lam, scale=scale, initial_state=h0, initial_stats=stats, centered=centered,
                     normalize_keys=normalize_keys, docs=docs, read=ReadPolicy())


def _step(q, k, v=None, g=None, beta=None, lam=None, h0=None, stats=None, *, recurrent, run, a=None, scale=None,
          centered=True, normalize_keys=True):
    """`_kernels` on these arrays (None: absent), differentiated as `_reference` of `recurrent`."""
    static = dict(scale=scale, centered=centered, normalize_keys=normalize_keys)
    kernels = functools.partial(_kernels, **static, run=run)
    reference = functools.partial(_reference, recurrent=recurrent, **static)
    fn = jax.custom_vjp(kernels)
    fn.defvjp(lambda *a: (kernels(*a), a), lambda a, cts: jax.vjp(reference, *a)[1](cts))
    # the states vary like the token inside shard_map (the custom VJP's cotangents must match its inputs)
    h0, stats = vary_like((h0, stats), (q, k, v, g, beta, a, lam))
    return fn(q, k, v, g, beta, a, lam, h0, stats)


def gla(q, k, v, g, *, scale, initial_state, docs, run, recurrent):
    """`ccq_jax.ops.gla` at T = 1: (o, final state)."""
    del docs
    return _step(q, k, v, g, h0=initial_state, scale=scale, recurrent=recurrent, run=run)


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, run, recurrent):
    """`ccq_jax.ops.gated_delta_rule` at T = 1: (o, final state)."""
    del docs
    return _step(q, k, v, g, beta, h0=initial_state, scale=scale, recurrent=recurrent, run=run)


def generalized_delta_rule(q, k, v, g, a, *, scale, initial_state, docs, run, recurrent):
    """`ccq_jax.ops.generalized_delta_rule` at T = 1: (o, final state)."""
    del docs
    return _step(q, k, v, g, a=a, h0=initial_state, scale=scale, recurrent=recurrent, run=run)


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, run, recurrent):
    """`ccq_jax.ops.ccq_query` at T = 1: (q_clean, final statistics)."""
    del docs
    return _step(q, k, lam=lam, stats=initial_stats, centered=centered, normalize_keys=normalize_keys,
                 recurrent=recurrent, run=run)


def ccq_gla(q, k, v, g, lam, *, scale, initial_state, initial_stats, centered, normalize_keys, docs, run, recurrent):
    """`ccq_jax.ops.ccq_gla` at T = 1: (o, (final state, final statistics)), the read then the backbone."""
    del docs
    return _step(q, k, v, g, lam=lam, h0=initial_state, stats=initial_stats, scale=scale, centered=centered,
                 normalize_keys=normalize_keys, recurrent=recurrent, run=run)


def ccq_gated_delta_rule(q, k, v, g, beta, lam, *, scale, initial_state, initial_stats, centered, normalize_keys,
                         docs, run, recurrent):
    """`ccq_jax.ops.ccq_gated_delta_rule` at T = 1: (o, (final state, final statistics))."""
    del docs
    return _step(q, k, v, g, beta, lam, initial_state, initial_stats, scale=scale, centered=centered,
                 normalize_keys=normalize_keys, recurrent=recurrent, run=run)
