"""`generalized_delta_rule`: validation, the implementations `impl=` chooses from, the public function."""

from ... import sharding
from .. import dispatch
from ..dispatch import Implementation
from ..xla import validate
from . import pallas_mosaic_tpu, pallas_triton, reference

IMPLEMENTATIONS = {
    "recurrent": Implementation(reference.recurrent),
    "chunk": Implementation(reference.chunk, chunked=True),
    "scan": Implementation(reference.scan),
    "pallas_triton": Implementation(pallas_triton.generalized_delta_rule, chunked=True, supports=pallas_triton.supports),
    "pallas_mosaic_tpu": Implementation(pallas_mosaic_tpu.generalized_delta_rule, chunked=True,
                                        supports=pallas_mosaic_tpu.supports),
}


def context_maps(shard, q, k, v, g, a, *, segment_ids, **options):
    """The shard's map (`sharding.splits_sequence`): a dense K x K transition and the shard's own final state, both from
    one run of the op itself (options: its scale, impl, ...) on values widened from the state [0 | I]
    (`Shard.widened`): each value column of the state evolves alone, s -> (I - k a^T) Diag(exp g) s + k v_c."""
    run = lambda values, start: generalized_delta_rule(q, k, values, g, a, initial_state=start,
                                                       output_final_state=True, segment_ids=segment_ids, **options)[1]
    return {"initial_state": shard.widened(run, k, v)}


@sharding.splits_sequence(context_maps)
def generalized_delta_rule(q, k, v, g, a, *, scale=None, initial_state=None, output_final_state=False,
                           segment_ids=None, impl="chunk", chunk_size=None, config=None, interpret=None, axes=None):
    """The generalized delta rule: S_t = (I - k_t a_t^T) Diag(exp g_t) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t.

    Token by token: S = Diag(exp g_t) S, then S = S + k_t (v_t - S^T a_t)^T: the state is read at the erase vector
    a_t, and the new value written along k_t. Every delta rule of the family is a choice of (g, a, v):
    gated_delta_rule g_t 1 (per head), a_t = beta_t k_t, v_t -> beta_t v_t; `kda` the same with g per channel;
    `gated_delta_rule_2` a_t = b_t * k_t, v_t -> w_t * v_t; `qed` adds a query direction to a_t. Here v is the
    value as written (fla's write vector u).

    q, k, a: [B, T, H, K]; g: [B, T, H, K], the log decay <= 0 per key channel; v: [B, T, H, V]. scale defaults to
    K**-0.5. initial_state: [B, H, K, V]. Returns (o [B, T, H, V] in v's dtype, final_state [B, H, K, V] fp32 or
    None). impl: "recurrent", "chunk" (the WY/UT form with the per-channel decay inside the chunk), "scan",
    "pallas_triton" ("pallas" on a GPU, and interpreted on a CPU) or "pallas_mosaic_tpu" ("pallas" on a TPU): the
    chunk form's factors in XLA, the state pass across chunks in a kernel (config: a Triton `KernelConfig`, none on
    Mosaic TPU; interpret: as `ccq_jax.ops.gla`'s).

    context_axis: inside `jax.shard_map`, with T split over that mesh axis: each device's tokens as the
    unsplit op would give them, and its shard's final state (`ccq_jax.ops.sharding`).
    axes: the mesh axes the op splits over under the current mesh (`ccq_jax.ops.OpsAxes`; None: none, the op
    runs as it is whatever the mesh).
    """
    q, k, v, g, a, dims = validate.generalized_inputs(q, k, v, g, a)
    return dispatch.call_backbone("generalized_delta_rule", IMPLEMENTATIONS, (q, k, v, g, a), dims, scale=scale,
                                  initial_state=initial_state, output_final_state=output_final_state,
                                  segment_ids=segment_ids, impl=impl, chunk_size=chunk_size, config=config,
                                  interpret=interpret, axes=axes)
