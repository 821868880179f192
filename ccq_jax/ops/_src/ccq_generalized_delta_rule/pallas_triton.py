"""`ccq_query` feeding `generalized_delta_rule`, both on the Triton kernels (composed: the read's output is the
backbone's query; autodiff joins their VJPs and sums the keys' two gradients in XLA)."""

from ..ccq_query import pallas_triton as read
from ..ccq_query.reference import feeding
from ..generalized_delta_rule import pallas_triton as backbone

supports = backbone.supports
ccq_generalized_delta_rule = feeding(read.ccq_query, backbone.generalized_delta_rule)
