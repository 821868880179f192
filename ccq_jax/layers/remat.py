"""What the backward pass recomputes instead of storing (`ModelConfig.remat_policy`).

"elementwise" (the default): the norms, gates, short convolutions and the SwiGLU product are functions under
`jax.checkpoint`: autodiff keeps only their inputs and recomputes the rest (their fp32 intermediates would be
several `[B, T, D]` fp32 tensors each); the q/k l2 normalisation is a custom VJP that keeps its output
(`ccq_jax.layers.gated_deltanet.l2_normalized`). A layer built with `recompute=False` ("none") calls the function
the checkpoint wraps instead, keeping those intermediates for a faster backward pass.

"dots": each block of a linear-attention layer under `jax.checkpoint` with `SAVE_DOTS_AND_KERNELS`: the backward
pass keeps the matmuls' outputs (projections, MLP, XLA forms' products), the mixer's output and what the kernels
keep for themselves (`ccq_jax.ops.KEPT`), and recomputes everything elementwise between them from those: the
norms' outputs, the residual stream inside the block, the short convolutions, the q/k normalisation and the
gates, which "elementwise" keeps as the kernels' and matmuls' inputs. No forward kernel runs again; KDA, GDN-2 and
QED's XLA chunk factors (their WY solves) are formed again. Attention blocks keep "elementwise" (the cuDNN and
splash kernels' residuals carry no name, so the policy would run their forward again). On TPUs libtpu 0.11.2 aborts
compiling a scanned CCQ-GDN 1.3B step under it (docs/tpu.md).

"block": every block whole (`jax.checkpoint_policies.nothing_saveable`: only its input is kept).
"""

import jax
from jax.ad_checkpoint import checkpoint_name

from ccq_jax.ops import KEPT

SAVE_DOTS_AND_KERNELS = jax.checkpoint_policies.save_from_both_policies(
    jax.checkpoint_policies.dots_saveable, jax.checkpoint_policies.save_only_these_names(KEPT))


def maybe_recomputed(fn, recompute: bool):
    """fn (a function under `jax.checkpoint`, or with its own lean VJP) when recompute, else the function it
    wraps."""
    return fn if recompute else fn.__wrapped__


def kept_output(o: jax.Array) -> jax.Array:
    """A mixer's output tagged `ccq_jax.ops.KEPT`: saved under "dots", where recomputing it would run the read's
    forward kernels again."""
    return checkpoint_name(o, KEPT)


def block_policy(remat_policy: str, attention: bool):
    """The `jax.checkpoint` policy a block runs under for `remat_policy` (`ModelConfig.remat_policy`), or None
    where the block runs as it is (attention: whether its mixer is softmax attention)."""
    if remat_policy == "block":
        return jax.checkpoint_policies.nothing_saveable
    if remat_policy == "dots" and not attention:
        return SAVE_DOTS_AND_KERNELS
    return None
