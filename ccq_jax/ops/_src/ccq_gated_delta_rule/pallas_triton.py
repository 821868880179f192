"""`ccq_gated_delta_rule` with the delta rule's state passes on the Triton kernels."""

from ..gated_delta_rule.pallas_triton import TRITON_PASSES, supports
from .kernels import with_passes

ccq_gated_delta_rule = with_passes(TRITON_PASSES)
__all__ = ["ccq_gated_delta_rule", "supports"]
