"""`ccq_gated_delta_rule` with the delta rule's state passes in Mosaic GPU (the rest on the Triton kernels)."""

from ccq_jax.ops.src.ccq_gated_delta_rule.kernels import with_passes
from ccq_jax.ops.src.gated_delta_rule.pallas_mosaic_gpu import MOSAIC_GPU_PASSES, supports

ccq_gated_delta_rule = with_passes(MOSAIC_GPU_PASSES)
__all__ = ["ccq_gated_delta_rule", "supports"]
