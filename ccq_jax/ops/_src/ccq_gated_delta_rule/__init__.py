"""Gated delta rule read with the CCQ-cleaned query: gated_delta_rule(ccq_query(q, k, lam), k, v, g, beta)."""
