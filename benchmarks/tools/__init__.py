"""Dev tools for the tests and benchmarks, kept out of the library: `lowering` (the GPU kernels an op lowers to, by
hooking JAX's Triton lowering), `kernel_twins` (XLA twins of the gated delta rule's per-chunk kernels) and
`compilation` (counting XLA compilations)."""
