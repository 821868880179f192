"""`ccq_gla`: validation, the implementations `impl=` chooses from (the references composed, the kernels fused),
the public function."""

import functools

from ... import sharding
from ..ccq_query.api import call_fused, fused_context_maps
from ..dispatch import Implementation
from ..gla.api import context_maps
from ..xla import validate
from . import pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_triton": Implementation(pallas_triton.ccq_gla, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.ccq_gla, chunked=True,
                                        supports=pallas_mosaic_tpu.supports),
}


@sharding.splits_sequence(functools.partial(fused_context_maps, context_maps))
def ccq_gla(q, k, v, g, lam, *, read=None, scale=None, initial_state=None, initial_stats=None, output_final_state=False,
            output_final_stats=False, centered=True, normalize_keys=True, segment_ids=None, impl="chunk",
            chunk_size=None, config=None, interpret=None, axes=None):
    """GLA read with the CCQ-cleaned query (write rule unchanged): gla(ccq_query(q, k, lam, read=read), k, v, g).

    Returns (o, (final_state or None, final_stats or None)).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final state and statistics (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, v, g, dims = validate.gla_inputs(q, k, v, g)
    read = validate.read_policy(read)
    lam = validate.ccq_gate(lam, *dims[:3], read)
    return call_fused("ccq_gla", IMPLEMENTATIONS, (q, k, v, g, lam), dims, read=read, scale=scale,
                      initial_state=initial_state, initial_stats=initial_stats, output_final_state=output_final_state,
                      output_final_stats=output_final_stats, centered=centered, normalize_keys=normalize_keys,
                      segment_ids=segment_ids, impl=impl, chunk_size=chunk_size, config=config, interpret=interpret,
                      axes=axes)
