"""`gla`: validation, the implementations `impl=` chooses from, the public function."""

import jax.numpy as jnp

from ... import sharding
from .. import dispatch
from ..dispatch import Implementation
from ..xla import validate
from ..xla.numerics import accum_dtype
from . import pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_triton": Implementation(pallas_triton.gla, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.gla, chunked=True, supports=pallas_mosaic_tpu.supports),
}


def context_maps(shard, q, k, v, g, *, segment_ids, **options):
    """The shard's map (`sharding.splits_sequence`): GLA's transition is diagonal, the exponentiated sum of the
    shard's log decays; its own final state from a zero start comes from the op itself (options: its scale, impl,
    ...)."""
    _, own = gla(q, k, v, g, segment_ids=segment_ids, output_final_state=True, **options)
    return {"initial_state": shard.diagonal(jnp.exp(jnp.sum(g.astype(accum_dtype(g)), axis=1)), own)}


@sharding.splits_sequence(context_maps)
def gla(q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, segment_ids=None, impl="chunk",
        chunk_size=None, config=None, interpret=None, axes=None):
    """Gated linear attention: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale * S_t^T q_t.

    q, k, g: [B, T, H, K] (g = log decay <= 0 per key channel); v: [B, T, H, V].
    scale defaults to K**-0.5. initial_state: [B, H, K, V]. Returns (o [B, T, H, V] in v's
    dtype, final_state [B, H, K, V] fp32 or None). config (a `KernelConfig`) and interpret
    apply to the kernel backends only.

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final state (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, v, g, dims = validate.gla_inputs(q, k, v, g)
    return dispatch.call_backbone("gla", IMPLEMENTATIONS, (q, k, v, g), dims, scale=scale,
                                  initial_state=initial_state, output_final_state=output_final_state,
                                  segment_ids=segment_ids, impl=impl, chunk_size=chunk_size, config=config,
                                  interpret=interpret, axes=axes)
