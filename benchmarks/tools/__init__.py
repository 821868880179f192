"""Dev tools for the tests and benchmarks, kept out of the library: `lowering` (the GPU kernels an op lowers to, by
hooking JAX's Triton lowering), `kernel_twins` (XLA twins of the gated delta rule's per-chunk kernels),
`compilation` (counting XLA compilations) and `targets` (deviceless GPU devices to compile for)."""
