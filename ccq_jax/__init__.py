"""ccq-jax: Curvature-Conditioned Query (CCQ) linear attention in JAX.

The functional ops (`ccq_jax.ops`) are the public core: GLA, the gated delta rule, the CCQ
read, and the fused CCQ variants, each with recurrent, chunked and associative-scan forms and
Pallas kernels.
"""

from ccq_jax.ops import CCQStats, ccq_gated_delta_rule, ccq_gla, ccq_query, gated_delta_rule, gla

__all__ = ["CCQStats", "ccq_gated_delta_rule", "ccq_gla", "ccq_query", "gated_delta_rule", "gla"]
__version__ = "0.1.0"
