"""Training: grain input pipeline, mesh sharding, the jit-compiled train step, orbax checkpoints."""
