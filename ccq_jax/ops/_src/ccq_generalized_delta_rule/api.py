"""`ccq_generalized_delta_rule` and the CCQ versions of the family's named members: validation, the
implementations `impl=` chooses from (the references composed), the public functions."""

import functools

from ... import sharding
from ..ccq_query.api import call_fused, fused_context_maps
from ..dispatch import Implementation
from ..generalized_delta_rule.api import context_maps
from ..generalized_delta_rule.family import gated_delta_rule_2_inputs, kda_inputs, qed_inputs
from ..xla import validate
from . import pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_triton": Implementation(pallas_triton.ccq_generalized_delta_rule, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.ccq_generalized_delta_rule, chunked=True,
                                        supports=pallas_mosaic_tpu.supports),
}


@sharding.splits_sequence(functools.partial(fused_context_maps, context_maps))
def ccq_generalized_delta_rule(q, k, v, g, a, lam, *, read=None, scale=None, initial_state=None, initial_stats=None,
                               output_final_state=False, output_final_stats=False, centered=True,
                               normalize_keys=True, segment_ids=None, impl="chunk", chunk_size=None, config=None,
                               interpret=None, axes=None):
    """The generalized delta rule read with the CCQ-cleaned query: generalized_delta_rule(ccq_query(q, k, lam,
    read=read), k, v, g, a). The read is backbone-independent: it changes the query the state is read with, and
    nothing the state is written with.

    Returns (o, (final_state or None, final_stats or None)).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final state and statistics (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, v, g, a, dims = validate.generalized_inputs(q, k, v, g, a)
    read = validate.read_policy(read)
    lam = validate.ccq_gate(lam, *dims[:3], read)
    return call_fused("ccq_generalized_delta_rule", IMPLEMENTATIONS, (q, k, v, g, a, lam), dims, read=read,
                      scale=scale, initial_state=initial_state, initial_stats=initial_stats,
                      output_final_state=output_final_state, output_final_stats=output_final_stats,
                      centered=centered, normalize_keys=normalize_keys, segment_ids=segment_ids, impl=impl,
                      chunk_size=chunk_size, config=config, interpret=interpret, axes=axes)


def ccq_kda(q, k, v, g, beta, lam, *, use_qk_l2norm_in_kernel=False, **options):
    """`ccq_jax.ops.kda` read with the CCQ-cleaned query (lam [B, T, H], the CCQ gate). options:
    `ccq_generalized_delta_rule`'s keywords. Returns (o, (final_state or None, final_stats or None))."""
    return ccq_generalized_delta_rule(*kda_inputs(q, k, v, g, beta, use_qk_l2norm_in_kernel), lam, **options)


def ccq_gated_delta_rule_2(q, k, v, g, b, w, lam, **options):
    """`ccq_jax.ops.gated_delta_rule_2` read with the CCQ-cleaned query (lam [B, T, H], the CCQ gate). options and
    returns: as `ccq_kda`'s."""
    return ccq_generalized_delta_rule(*gated_delta_rule_2_inputs(q, k, v, g, b, w), lam, **options)


def ccq_qed(q, k, v, g, b, w, lam, ccq_lam, *, project=True, gate_query=True, **options):
    """`ccq_jax.ops.qed` (its lam, project and gate_query) read with the CCQ-cleaned query, ccq_lam [B, T, H] the CCQ
    gate (checked here under its own name); the erase vector is built from the raw query. options and returns: as
    `ccq_kda`'s."""
    inputs = qed_inputs(q, k, v, g, b, w, lam, project, gate_query)
    ccq_lam = validate.ccq_gate(ccq_lam, *inputs[0].shape[:3], validate.read_policy(options.get("read")), "ccq_lam")
    return ccq_generalized_delta_rule(*inputs, ccq_lam, **options)
