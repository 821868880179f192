"""`ccq_generalized_delta_rule` in plain XLA: each form of the CCQ read feeding the same form of the generalized
delta rule (`ccq_query.reference.feeding`)."""

from ..ccq_query import reference as read
from ..generalized_delta_rule import reference as backbone

recurrent = read.feeding(read.recurrent, backbone.recurrent)
chunk = read.feeding(read.chunk, backbone.chunk)
scan = read.feeding(read.scan, backbone.scan)
