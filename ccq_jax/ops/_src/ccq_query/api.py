"""`ccq_query` and `covariance_apply`: validation, the implementations `impl=` chooses from, the public
functions."""

import jax.numpy as jnp

from ... import sharding
from .. import dispatch
from ..dispatch import REFERENCES, Implementation
from ..xla import validate
from ..xla.numerics import HIGHEST, ccq_keys, doc_ids
from ..xla.types import CCQStats, ReadPolicy
from . import pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_triton": Implementation(pallas_triton.ccq_query, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.ccq_query, chunked=True,
                                        supports=pallas_mosaic_tpu.supports),
}
STATIC = ("centered", "normalize_keys")


def context_maps(shard, q, k, lam, *, segment_ids, normalize_keys, **_):
    """The shard's map (`sharding.splits_sequence`): the statistics are sums, passed on or dropped; the shard's own are
    those of its last document's keys."""
    b, t = k.shape[:2]
    keys = ccq_keys(k, normalize_keys)
    docs = doc_ids(segment_ids, b, t)
    last = (docs == docs[:, -1:]).astype(keys.dtype)  # [B, T]
    own = CCQStats(jnp.einsum("bthk,bthl,bt->bhkl", keys, keys, last, precision=HIGHEST),
                   jnp.einsum("bthk,bt->bhk", keys, last, precision=HIGHEST),
                   jnp.broadcast_to(jnp.sum(last, axis=1)[:, None], (b, k.shape[2])))
    return {"initial_stats": shard.counts(own)}


def fused_context_maps(backbone_maps, shard, q, k, *rest_and_lam, segment_ids, centered, normalize_keys, read,
                       **options):
    """A fused CCQ op's maps: its backbone's (`backbone_maps`, options: scale, impl, ...) and the statistics' (the
    read policy changes no statistics)."""
    del read
    *rest, lam = rest_and_lam
    return {**backbone_maps(shard, q, k, *rest, segment_ids=segment_ids, **options),
            **context_maps(shard, q, k, lam, segment_ids=segment_ids, normalize_keys=normalize_keys)}


def policy_options(read, impl):
    """{"read": the policy} for the XLA forms; {} for kernels, which compute the first-order read only (any other
    policy there is a ValueError, never a silent change of form)."""
    if impl in REFERENCES:
        return {"read": read}
    if read.kind != "first_order":
        raise ValueError(f"read: {read.kind!r} runs on impl 'recurrent', 'chunk' or 'scan'; the kernels "
                         f"(impl={impl!r}) compute the first-order read only")
    return {}


# the product Sigma_t x_t alone, through the same forms (`covariance_apply`)
_SIGMA = ReadPolicy("sigma")


def _read(q, k, lam, read, *, centered, normalize_keys, initial_stats, segment_ids, impl, chunk_size, config,
          interpret, axes):
    """One form of the read chosen by `impl` on validated q, k, lam and policy; returns (its output, final stats)."""
    b, t, h, dk = q.shape
    call = dispatch.call_of(q, k, chunk_size=chunk_size, interpret=interpret)
    policy = policy_options(read, impl)
    fn, options = dispatch.prepare("ccq_query", IMPLEMENTATIONS, impl, call, static=(*STATIC, *policy),
                                   config=config, axes=axes)
    return fn(q, k, lam, centered=bool(centered), normalize_keys=bool(normalize_keys),
              initial_stats=validate.stats(initial_stats, b, h, dk), docs=validate.documents(segment_ids, b, t),
              **policy, **options)


@sharding.splits_sequence(context_maps)
def ccq_query(q, k, lam, *, read=None, centered=True, normalize_keys=True, initial_stats=None,
              output_final_stats=False, segment_ids=None, impl="chunk", chunk_size=None, config=None,
              interpret=None, axes=None):
    """The CCQ read: q_clean_t = q_t - lam_t * Sigma_t q_t (the paper's), or another policy of the same Sigma_t.

    Sigma_t = C_t / n_t - (m_t / n_t)(m_t / n_t)^T (second term only when `centered`), with
    C_t = sum k^ k^^T, m_t = sum k^ and n_t the count over the tokens of the current document
    up to and including t; k^ = k / ||k|| when `normalize_keys` (then I - lam Sigma has its
    eigenvalues in [1 - lam, 1]). q, k: [B, T, H, K]; lam: [B, T, H], in [0, 1] (>= 0 for read "cg").
    read: None or "first_order" (the paper), "neumann" (sum_{i<=terms} (-lam Sigma)^i q) or "cg" (conjugate
    gradient on (I + lam Sigma) x = q), or a `ReadPolicy` with the counts (`ccq_jax.ops.ReadPolicy`); the
    kernels compute "first_order" only.
    Returns (q_clean [B, T, H, K] in q's dtype, final_stats CCQStats or None).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final statistics (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, _, (b, t, h, _, _) = validate.qkv(q, k)
    read = validate.read_policy(read)
    lam = validate.ccq_gate(lam, b, t, h, read)
    q_clean, final = _read(q, k, lam, read, centered=centered, normalize_keys=normalize_keys,
                           initial_stats=initial_stats, segment_ids=segment_ids, impl=impl, chunk_size=chunk_size,
                           config=config, interpret=interpret, axes=axes)
    return q_clean, (final if output_final_stats else None)


def covariance_context_maps(shard, x, k, **options):
    """`covariance_apply`'s shard map: the statistics', as for `ccq_query`."""
    return context_maps(shard, x, k, None, **options)


@sharding.splits_sequence(covariance_context_maps)
def covariance_apply(x, k, *, centered=True, normalize_keys=True, initial_stats=None, output_final_stats=False,
                     segment_ids=None, impl="chunk", chunk_size=None, axes=None):
    """Sigma_t x_t for per-token vectors x [B, T, H, K] (fp32, or fp64 for fp64 inputs): the CCQ statistics of the
    keys k [B, T, H, K] (`ccq_query`'s Sigma_t, same conventions) applied to x, the product every read policy
    is built from. impl: "recurrent", "chunk" or "scan"; axes: as `ccq_query`'s (the sequence split over
    `axes.context`; XLA partitions the rest).
    Returns (Sigma x [B, T, H, K], final_stats CCQStats or None).
    """
    x, k, _, (b, t, h, _, _) = validate.qkv(x, k)
    if impl not in REFERENCES:
        raise ValueError(f"impl: covariance_apply runs on {list(REFERENCES)}, got {impl!r}")
    x = x.astype(jnp.result_type(jnp.float32, x.dtype))
    out, final = _read(x, k, jnp.zeros((b, t, h), x.dtype), _SIGMA, centered=centered,
                       normalize_keys=normalize_keys, initial_stats=initial_stats, segment_ids=segment_ids,
                       impl=impl, chunk_size=chunk_size, config=None, interpret=None, axes=axes)
    return out, (final if output_final_stats else None)


def call_fused(op, table, inputs, dims, *, read, scale, initial_state, initial_stats, output_final_state,
               output_final_stats, centered, normalize_keys, segment_ids, impl, chunk_size, config, interpret, axes):
    """A fused CCQ op (`ccq_gla`, `ccq_gated_delta_rule`) on validated inputs (q, k, the backbone's others, lam)
    of dims (B, T, H, K, V) and read policy: the rest validated, the implementation chosen from `table`, the
    outputs kept as asked.
    """
    b, t, h, dk, dv = dims
    call = dispatch.call_of(*inputs[:3], chunk_size=chunk_size, interpret=interpret)
    policy = policy_options(read, impl)
    fn, options = dispatch.prepare(op, table, impl, call, static=("scale", *STATIC, *policy), config=config,
                                   axes=axes)
    o, (state, stats) = fn(*inputs, scale=validate.scale(scale, dk),
                           initial_state=validate.state(initial_state, b, h, dk, dv),
                           initial_stats=validate.stats(initial_stats, b, h, dk), centered=bool(centered),
                           normalize_keys=bool(normalize_keys), docs=validate.documents(segment_ids, b, t), **policy,
                           **options)
    return o, (state if output_final_state else None, stats if output_final_stats else None)
