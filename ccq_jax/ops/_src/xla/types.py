"""Typed containers shared by every implementation of the ops."""

from typing import NamedTuple

import jax


class CCQStats(NamedTuple):
    """Running key statistics of the CCQ read, one set per sequence and head (all fp32).

    cov:     [B, H, K, K]  sum of k^ k^^T over the tokens seen in the current segment.
    key_sum: [B, H, K]     sum of k^ over the same tokens.
    count:   [B, H]        how many tokens that is.
    """

    cov: jax.Array
    key_sum: jax.Array
    count: jax.Array


READS = ("first_order", "neumann", "cg")


class ReadPolicy(NamedTuple):
    """How the CCQ read turns q into q_clean with the statistics' Sigma_t (`ccq_jax.ops.ccq_query`).

    kind:       "first_order"  q - lam Sigma q                          (the paper's read)
                "neumann"      sum_{i=0..terms} (-lam Sigma)^i q         (terms = 1 is the paper's read)
                "cg"           `iterations` conjugate-gradient steps on (I + lam Sigma) x = q, from x = q
    terms:      the Neumann series' highest power (kind "neumann").
    iterations: conjugate-gradient steps (kind "cg").
    The last two are the first-order read's approximations of (I + lam Sigma)^-1 q, the ridge solution that
    MesaNet-style reads compute.
    """

    kind: str = "first_order"
    terms: int = 1
    iterations: int = 1
