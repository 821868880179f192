"""GLA read with the CCQ-cleaned query (write rule unchanged): gla(ccq_query(q, k, lam), k, v, g)."""
