"""T = (I + A)^-1 for a batch of strictly lower triangular C x C matrices (the gated delta rule's UT transform).

fla's `solve_tril` does the same: each 16 x 16 diagonal block is inverted by forward
substitution, then the blocks below the diagonal follow block row by block row,

    T_ii = (I + A_ii)^-1,   T_ij = -T_ii sum_{j <= k < i} A_ik T_kj   (j < i),

which is a blocked triangular solve (as stable as one), in fp32 with IEEE dots. One program
per matrix; the 16 x 16 blocks are separate register tiles (tiles are loaded and stored by
block, never sliced). Layout: `[B, N, H, C, C]`, C a multiple of 16.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels._tiles import SUB, dot, iota, launch

f32 = jnp.float32


def unit_lower_inverse(a, *, interpret):
    """(I + A)^-1 for `a` `[B, N, H, C, C]` fp32, strictly lower triangular (entries on or above the diagonal
    must be zero). Returns the same shape, fp32, lower triangular with a unit diagonal."""
    b_, n_, heads, c, _ = a.shape
    blocks = c // SUB

    def kernel(a_ref, t_ref):
        n, bh = pl.program_id(0), pl.program_id(1)
        b, h = bh // heads, bh % heads
        span = lambda i: pl.ds(i * SUB, SUB)
        A = lambda i, j: a_ref[b, n, h, span(i), span(j)]
        T = {}
        for i in range(blocks):
            T[i, i] = _diagonal_inverse(a_ref, b, n, h, i * SUB)
            for j in range(i - 1, -1, -1):
                acc = dot(A(i, j), T[j, j])
                for k in range(j + 1, i):
                    acc += dot(A(i, k), T[k, j])
                T[i, j] = -dot(T[i, i], acc)
            for j in range(blocks):
                t_ref[b, n, h, span(i), span(j)] = T[i, j] if j <= i else jnp.zeros((SUB, SUB), f32)

    out = jax.ShapeDtypeStruct(a.shape, f32)
    return launch(kernel, out, (n_, b_ * heads), interpret=interpret, name="unit_lower_inverse")(a)


def _diagonal_inverse(a_ref, b, n, h, start):
    """(I + A_ii)^-1 of the 16 x 16 diagonal block at rows/columns `start`, by forward substitution:
    row r of the inverse is e_r - sum_{j < r} A_rj (row j of the inverse)."""
    i = iota(SUB)

    def row(r, X):
        a_r = a_ref[b, n, h, start + r, pl.ds(start, SUB)]  # zero from column r on
        new = (i == r).astype(f32) - jnp.sum(a_r[:, None] * X, axis=0)
        return jnp.where(i[:, None] == r, new[None, :], X)

    return jax.lax.fori_loop(1, SUB, row, (i[:, None] == i[None, :]).astype(f32))


__all__ = ["unit_lower_inverse"]
