"""`ccq_gated_delta_rule` with the delta rule's state passes in Mosaic GPU (the rest on the Triton kernels)."""

from ..gated_delta_rule.pallas_mosaic_gpu import MOSAIC_GPU_PASSES, supports
from .kernels import with_passes

ccq_gated_delta_rule = with_passes(MOSAIC_GPU_PASSES)
__all__ = ["ccq_gated_delta_rule", "supports"]
