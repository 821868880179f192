"""`gated_delta_rule`: validation, the implementations `impl=` chooses from, the public function."""

from ... import sharding
from .. import dispatch
from ..dispatch import Implementation
from ..xla import validate
from . import pallas_mosaic_gpu, pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_mosaic_gpu": Implementation(pallas_mosaic_gpu.gated_delta_rule, chunked=True,
                                        supports=pallas_mosaic_gpu.supports),
    "pallas_triton": Implementation(pallas_triton.gated_delta_rule, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.gated_delta_rule, chunked=True,
                                        supports=pallas_mosaic_tpu.supports),
}


def context_maps(shard, q, k, v, g, beta, *, segment_ids, **options):
    """The shard's map (`sharding.splits_sequence`): a dense K x K transition and the shard's own final state, both from
    one run of the op itself (options: its scale, impl, ...) on values widened from the state [0 | I]
    (`Shard.widened`): the delta rule acts on each value column alone."""
    run = lambda values, start: gated_delta_rule(q, k, values, g, beta, initial_state=start, output_final_state=True,
                                                 segment_ids=segment_ids, **options)[1]
    return {"initial_state": shard.widened(run, k, v)}


@sharding.splits_sequence(context_maps)
def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                     segment_ids=None, impl="chunk", chunk_size=None, config=None, interpret=None, axes=None):
    """Gated delta rule (fla's): S = exp(g_t) S; u_t = beta_t (v_t - S^T k_t); S = S + k_t u_t^T; o_t = scale S^T q_t.

    q, k: [B, T, H, K]; v: [B, T, H, V]; g (log decay <= 0), beta (in [0, 2]): [B, T, H].
    Returns (o [B, T, H, V], final_state [B, H, K, V] fp32 or None).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final state (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, v, g, beta, dims = validate.delta_inputs(q, k, v, g, beta)
    return dispatch.call_backbone("gated_delta_rule", IMPLEMENTATIONS, (q, k, v, g, beta), dims, scale=scale,
                                  initial_state=initial_state, output_final_state=output_final_state,
                                  segment_ids=segment_ids, impl=impl, chunk_size=chunk_size, config=config,
                                  interpret=interpret, axes=axes)
