"""Pallas kernels (GPU: Mosaic GPU / Triton; TPU: Mosaic) behind `ccq_jax.ops`'s `impl="pallas"`.

Kernels take arrays and return arrays and never import `ccq_jax`; validation, padding and
backend choice stay in `ccq_jax.ops` (see docs/design.md).
"""
