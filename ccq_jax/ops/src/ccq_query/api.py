"""`ccq_query`: validation, the implementations `impl=` chooses from, the public function."""

import jax.numpy as jnp

from ccq_jax.ops import context_parallel, registry, validate
from ccq_jax.ops.numerics import HIGHEST, ccq_keys, doc_ids
from ccq_jax.ops.registry import Implementation
from ccq_jax.ops.types import CCQStats
from ccq_jax.ops.src.ccq_query import pallas_mosaic_tpu, pallas_triton, reference

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
    """The shard's map (`context_parallel`): the statistics are sums, passed on or dropped; the shard's own are
    those of its last document's keys."""
    b, t = k.shape[:2]
    keys = ccq_keys(k, normalize_keys)
    docs = doc_ids(segment_ids, b, t)
    last = (docs == docs[:, -1:]).astype(keys.dtype)  # [B, T]
    own = CCQStats(jnp.einsum("bthk,bthl,bt->bhkl", keys, keys, last, precision=HIGHEST),
                   jnp.einsum("bthk,bt->bhk", keys, last, precision=HIGHEST),
                   jnp.broadcast_to(jnp.sum(last, axis=1)[:, None], (b, k.shape[2])))
    return {"initial_stats": shard.counts(own)}


def fused_context_maps(backbone_maps, shard, q, k, *rest_and_lam, segment_ids, centered, normalize_keys, **options):
    """A fused CCQ op's maps: its backbone's (`backbone_maps`, options: scale, impl, ...) and the statistics'."""
    *rest, lam = rest_and_lam
    return {**backbone_maps(shard, q, k, *rest, segment_ids=segment_ids, **options),
            **context_maps(shard, q, k, lam, segment_ids=segment_ids, normalize_keys=normalize_keys)}


@context_parallel.splits_sequence(context_maps)
def ccq_query(q, k, lam, *, centered=True, normalize_keys=True, initial_stats=None, output_final_stats=False,
              segment_ids=None, impl="chunk", chunk_size=None, config=None, interpret=None):
    """The CCQ read: q_clean_t = q_t - lam_t * Sigma_t q_t.

    Sigma_t = C_t / n_t - (m_t / n_t)(m_t / n_t)^T (second term only when `centered`), with
    C_t = sum k^ k^^T, m_t = sum k^ and n_t the count over the tokens of the current document
    up to and including t; k^ = k / ||k|| when `normalize_keys` (then I - lam Sigma has its
    eigenvalues in [1 - lam, 1]). q, k: [B, T, H, K]; lam in [0, 1]: [B, T, H].
    Returns (q_clean [B, T, H, K] in q's dtype, final_stats CCQStats or None).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final statistics (`ccq_jax.ops.context_parallel`).
    """
    q, k, _, (b, t, h, dk, _) = validate.qkv(q, k)
    lam = validate.ccq_gate(lam, b, t, h)
    call = registry.call_of(q, k, chunk_size=chunk_size, interpret=interpret)
    fn, options = registry.prepare("ccq_query", IMPLEMENTATIONS, impl, call, static=STATIC, config=config)
    q_clean, final = fn(q, k, lam, centered=bool(centered), normalize_keys=bool(normalize_keys),
                        initial_stats=validate.stats(initial_stats, b, h, dk),
                        docs=validate.documents(segment_ids, b, t), **options)
    return q_clean, (final if output_final_stats else None)


def call_fused(op, table, inputs, dims, *, scale, initial_state, initial_stats, output_final_state,
               output_final_stats, centered, normalize_keys, segment_ids, impl, chunk_size, config, interpret):
    """A fused CCQ op (`ccq_gla`, `ccq_gated_delta_rule`) on validated inputs (q, k, the backbone's others, lam)
    of dims (B, T, H, K, V): the rest validated, the implementation chosen from `table`, the outputs kept as asked.
    """
    b, t, h, dk, dv = dims
    call = registry.call_of(*inputs[:3], chunk_size=chunk_size, interpret=interpret)
    fn, options = registry.prepare(op, table, impl, call, static=("scale", *STATIC), config=config)
    o, (state, stats) = fn(*inputs, scale=validate.scale(scale, dk),
                           initial_state=validate.state(initial_state, b, h, dk, dv),
                           initial_stats=validate.stats(initial_stats, b, h, dk), centered=bool(centered),
                           normalize_keys=bool(normalize_keys), docs=validate.documents(segment_ids, b, t), **options)
    return o, (state if output_final_state else None, stats if output_final_stats else None)
