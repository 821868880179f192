"""One token per row on the step kernels (`pallas_kernels.recurrent_step`): what the Triton backends run when T = 1.

A decode step feeds each row one token. The chunked kernels would pad it to a whole chunk and run their passes;
these run one kernel per op instead (two for a fused CCQ op: the read, then the backbone), reading and writing
the state and the CCQ statistics once. Each is differentiable with the gradient of the op's token-by-token
recurrence (`jax.vjp` of the reference at T = 1): a one-token backward is as small as the step.

The signatures are the reference forms' (`docs` included, and ignored: one token lies in the document the initial
state belongs to), plus `run`, the call's `Launch`; `ccq_jax.ops.src.ccq_query.reference.feeding` composes the
read with a backbone as it does for the references.
"""

import jax
import jax.numpy as jnp

from ccq_jax.ops.numerics import L2_NORM_EPS
from ccq_jax.ops.pallas_layout import pad_state, width
from ccq_jax.ops.src.ccq_query import reference as read_reference
from ccq_jax.ops.src.gated_delta_rule import reference as delta_reference
from ccq_jax.ops.src.gla import reference as gla_reference
from ccq_jax.ops.types import CCQStats
from pallas_kernels import recurrent_step

f32 = jnp.float32


def one_token(q) -> bool:
    """Whether a call on q [B, T, H, K] is a decode step (T = 1), which the step kernels take."""
    return q.shape[1] == 1


def _with_reference_gradient(kernel, reference, *arrays):
    """kernel(*arrays), differentiated as reference(*arrays) (both take and return the same arrays)."""
    fn = jax.custom_vjp(kernel)
    fn.defvjp(lambda *a: (kernel(*a), a), lambda a, cts: jax.vjp(reference, *a)[1](cts))
    return fn(*arrays)


def _token(x, to_width=None):
    """[B, 1, H, D] -> [B, H, D] (zero-padded to `to_width`); [B, 1, H] -> [B, H]."""
    x = x[:, 0]
    return x if to_width is None else jnp.pad(x, [(0, 0), (0, 0), (0, to_width - x.shape[-1])])


def _one_document(q):
    return jnp.zeros(q.shape[:2], jnp.int32)


def _backbone(reference, q, k, v, gates, *, scale, initial_state, run):
    """(o [B, 1, H, V] in v's dtype, final state) of `state_step`; gates: (g [B, 1, H, K],) for GLA, (g [B, 1, H],
    beta [B, 1, H]) for the delta rule."""
    dk, dv = q.shape[-1], v.shape[-1]
    kp, vp = width(dk), width(dv)

    def kernel(q, k, v, h0, *gates):
        g, beta = (_token(gates[0], kp), None) if len(gates) == 1 else (_token(gates[0]), _token(gates[1]))
        dtype = jnp.result_type(q, k, v)
        o, state = recurrent_step.state_step(_token(q.astype(dtype), kp), _token(k.astype(dtype), kp),
                                             _token(v.astype(dtype), vp), g, beta, pad_state(h0, kp, vp),
                                             scale=scale, out_dtype=v.dtype, **run.kw)
        return o[:, None, :, :dv], state[:, :, :dk, :dv].astype(h0.dtype)

    def ground(q, k, v, h0, *gates):
        return reference(q, k, v, *gates, scale=scale, initial_state=h0, docs=_one_document(q))

    return _with_reference_gradient(kernel, ground, q, k, v, initial_state, *gates)


def gla(q, k, v, g, *, scale, initial_state, docs, run):
    """`ccq_jax.ops.gla` at T = 1: (o, final state)."""
    del docs
    return _backbone(gla_reference.recurrent, q, k, v, (g,), scale=scale, initial_state=initial_state, run=run)


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, run):
    """`ccq_jax.ops.gated_delta_rule` at T = 1: (o, final state)."""
    del docs
    return _backbone(delta_reference.recurrent, q, k, v, (g, beta), scale=scale, initial_state=initial_state,
                     run=run)


def ccq_query(q, k, lam, *, centered, normalize_keys, initial_stats, docs, run):
    """`ccq_jax.ops.ccq_query` at T = 1: (q_clean, final statistics)."""
    del docs
    dk = q.shape[-1]
    kp = width(dk)

    def kernel(q, k, lam, cov, key_sum, count):
        dtype = jnp.result_type(q, k)
        pad = [(0, 0), (0, 0), (0, kp - dk)]
        q_clean, *stats = recurrent_step.ccq_read_step(
            _token(q.astype(dtype), kp), _token(k.astype(dtype), kp), _token(lam),
            jnp.pad(cov.astype(f32), pad + [(0, kp - dk)]), jnp.pad(key_sum.astype(f32), pad), count.astype(f32),
            centered=centered, eps=L2_NORM_EPS if normalize_keys else None, **run.kw)
        out = CCQStats(stats[0][:, :, :dk, :dk], stats[1][..., :dk], stats[2])
        return (q_clean[:, None, :, :dk].astype(q.dtype),
                CCQStats(*(s.astype(x.dtype) for s, x in zip(out, (cov, key_sum, count)))))

    def ground(q, k, lam, *stats):
        return read_reference.recurrent(q, k, lam, centered=centered, normalize_keys=normalize_keys,
                                        initial_stats=CCQStats(*stats), docs=_one_document(q))

    return _with_reference_gradient(kernel, ground, q, k, lam, *initial_stats)


def ccq_gla(q, k, v, g, lam, *, run, **options):
    """`ccq_jax.ops.ccq_gla` at T = 1: (o, (final state, final statistics)), the read then the backbone."""
    return read_reference.feeding(ccq_query, gla)(q, k, v, g, lam, run=run, **options)


def ccq_gated_delta_rule(q, k, v, g, beta, lam, *, run, **options):
    """`ccq_jax.ops.ccq_gated_delta_rule` at T = 1: (o, (final state, final statistics))."""
    return read_reference.feeding(ccq_query, gated_delta_rule)(q, k, v, g, beta, lam, run=run, **options)
