"""A few rows against a large weight matrix: the decode step's LM head, x [M, K] @ w [K, N] for M up to 64.

At one or two rows per step the product reads the whole weight for a handful of multiply-adds per element: it is
bound by the weight's bytes. XLA's GEMMs of this shape (gla-1.3b's LM head, 131 MB at two rows) ran at 0.79 TB/s on
an H100 (24 % of its HBM rate; docs/benchmarks.md). Here the grid splits the weight into [K / splits, BN] panels,
enough of them to keep every SM loading: a program per (column tile, K split, row tile) walks its panel in
[BK, BN] tiles (each a coalesced load of BN contiguous elements per row, pipelined by Triton over `num_stages`)
and accumulates the rows' products in fp32 on the tensor cores. The K splits' partial sums come back as
[splits, Mp, N] fp32 for the caller to add (a reduction XLA fuses with whatever reads the logits).

The rows are padded to the row tile (16 at least: the smallest tensor-core dot) by the caller; K and N must be
multiples of the tiles (powers of two >= 16).
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, dot, launch

f32 = jnp.float32


def row_matmul_partials(x, w, *, splits, interpret, config=DEFAULT_CONFIG, block_n=128, block_k=128,
                        block_m=16):
    """[splits, Mp, N] fp32: the products of x [Mp, K] with w [K, N] over each of `splits` equal ranges of K (their
    sum is x @ w). Mp a multiple of block_m, K of splits * block_k, N of the column tile (`config.width` or
    block_n)."""
    mp, dk = x.shape
    n = w.shape[1]
    bn, bk, bm = config.width or block_n, block_k, block_m
    steps = dk // (splits * bk)

    def kernel(x_ref, w_ref, o_ref):
        cols, split = pl.ds(pl.program_id(0) * bn, bn), pl.program_id(1)
        rows = pl.ds(pl.program_id(2) * bm, bm)

        def step(i, acc):
            ks = pl.ds((split * steps + i) * bk, bk)
            return acc + dot(x_ref[rows, ks], w_ref[ks, cols])

        o_ref[split, rows, cols] = jax.lax.fori_loop(0, steps, step, jnp.zeros((bm, bn), f32))

    out = jax.ShapeDtypeStruct((splits, mp, n), f32)
    return launch(kernel, out, (n // bn, splits, mp // bm), interpret=interpret, config=config, num_warps=4,
                  num_stages=4, name="row_matmul")(x, w)
