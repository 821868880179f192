"""Pallas kernels behind `ccq_jax.ops`'s `impl="pallas"` (GPU: the Triton lowering and Mosaic GPU; TPU: Mosaic TPU).

Kernels take arrays and return arrays and never import `ccq_jax`; validation, padding, the
custom VJPs and the choice between compiling and interpreting stay in the ops' backends
(`ccq_jax/ops/_src/<op>/pallas_*.py` and `_src/pallas/`; see docs/design.md).

  linear_attention  the chunked GLA pieces (with no gate: the CCQ covariance read)
  linear_attention_grad  their backward's own kernels (dA, dq and dk, the diagonal blocks)
  delta_rule        the sequential passes of the chunked gated delta rule and its per-chunk gradients
  delta_wy          its per-chunk WY/UT form (T, then w and u from T) and its gradient
  ccq_read          the CCQ read's running key sums and cleaned query around the covariance, and their gradients
  mosaic_delta_states  the gated delta rule's three state passes in Mosaic GPU
  recurrent_step    one token per row through the recurrences and the CCQ read (a decode step)
  row_matmul        a few rows times a large weight (a decode step's LM head)
  gla_tpu           GLA's chunked forward and backward in Mosaic TPU (with no gate: the CCQ covariance read)
  delta_tpu         the delta rules' state pass across chunks in Mosaic TPU (decay per head or per key row), and
                    its backward
  delta_pass        the same state pass and backward on Triton (the generalized delta rule's GPU kernels)
  tpu               what the Mosaic TPU kernels share (precision, grid semantics, interpret mode, cost estimate)
  tiles             in-kernel helpers, `KernelConfig`, and the one place Triton kernels are launched
"""
