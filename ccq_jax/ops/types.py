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
