"""`ccq_gated_delta_rule` with the delta rule's state passes on the Triton kernels."""

from ccq_jax.ops.src.ccq_gated_delta_rule.kernels import with_passes
from ccq_jax.ops.src.gated_delta_rule.pallas_triton import TRITON_PASSES, supports

ccq_gated_delta_rule = with_passes(TRITON_PASSES)
__all__ = ["ccq_gated_delta_rule", "supports"]
