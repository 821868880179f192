"""Whether the layers' elementwise pieces are recomputed in the backward pass (`ModelConfig.remat_policy`).

The norms, gates, short convolutions and the SwiGLU product are functions under `jax.checkpoint`:
autodiff keeps only their inputs and recomputes the rest (their fp32 intermediates would be
several `[B, T, D]` fp32 tensors each); the q/k l2 normalisation is a custom VJP that keeps its output
(`ccq_jax.layers.gated_deltanet.l2_normalized`). A layer built with `recompute=False` calls the function
the checkpoint wraps instead, keeping those intermediates for a faster backward pass.
"""


def maybe_recomputed(fn, recompute: bool):
    """fn (a function under `jax.checkpoint`, or with its own lean VJP) when recompute, else the function it
    wraps."""
    return fn if recompute else fn.__wrapped__
