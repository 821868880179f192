"""The ops wing's private code, in floors; a module imports only from its own floor or the floors below it:

  ccq_gla/ ccq_gated_delta_rule/ ccq_generalized_delta_rule/
                                   composite ops: the CCQ read feeding a backbone; they import the op packages they
                                   compose (ccq_query and gla, gated_delta_rule or generalized_delta_rule)
  gla/ gated_delta_rule/ generalized_delta_rule/ ccq_query/
                                   the base ops, one package each, never importing a sibling (generalized_delta_rule
                                   also holds its family's named front doors, `family.py`: kda, gated_delta_rule_2,
                                   qed)
  lm_head/                         the LM head's logits (a separate op: api, pallas_triton)
  attention/                       causal softmax attention for the attention layers (a separate op: api, and
                                   pallas_mosaic_tpu, the glue to JAX's own Pallas TPU splash attention kernel)
  pallas/                          what the kernel backends share: the padded layout, the one-token step kernels
                                   (handed each op's recurrence), GLA's Triton custom VJP, the Mosaic TPU helpers
  dispatch.py                      `impl=`: the names, `Implementation`, the platform policy
  xla/                             numerics, validation, types, the chunked layout and recurrences (no Pallas)

Each op package is laid out the same way: `api.py` (validation, the public function, the table of implementations
`impl=` chooses from), `reference.py` (the recurrent, chunk and scan forms in XLA) and one module per kernel
backend (`pallas_triton.py`, `pallas_mosaic_gpu.py`, `pallas_mosaic_tpu.py`), each owning its custom VJP or
composing its parts'. The public functions are re-exported by `ccq_jax.ops`; `ccq_jax.ops.sharding` (above this
package) runs them over a mesh. Modules here import each other relatively (tests/ops/test_layout.py checks the
floors).
"""
