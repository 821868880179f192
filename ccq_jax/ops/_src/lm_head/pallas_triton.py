"""The LM head's row-matmul kernel (`pallas_kernels.row_matmul`) under its custom VJP: the forward splits the product
over enough programs to aim at the HBM rate; the backward is XLA's two GEMMs."""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.row_matmul import row_matmul_partials

PROGRAMS = 256  # K is split until the grid has this many programs (about two per SM of an H100 or H200: 132)
ROW_TILE = 16  # the smallest tensor-core dot
TILE_BYTES = 32 * 1024  # a weight tile's bytes: four pipeline stages of it fit an SM's shared memory (227 KB)


def _tile(d, cap=128):
    """The largest power of two <= cap that divides d (d a multiple of 16; cap a power of two >= 16)."""
    tile = cap
    while d % tile:
        tile //= 2
    return tile


def _splits(column_tiles, row_tiles, k_tiles):
    """The number of K ranges (a power of two dividing k_tiles) that brings the grid to PROGRAMS programs."""
    splits = 1
    while column_tiles * row_tiles * splits < PROGRAMS and k_tiles % (2 * splits) == 0:
        splits *= 2
    return splits


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def kernel_logits(x, head, interpret, config):
    """x [rows, D] @ head [D, vocab] on the kernel (rows <= 64; both dims multiples of 16), fp32."""
    rows, dk = x.shape
    n = head.shape[1]
    block_n = config.width or _tile(n)
    block_k = _tile(dk, min(128, TILE_BYTES // (block_n * head.dtype.itemsize)))
    padded = -(-rows // ROW_TILE) * ROW_TILE
    splits = _splits(n // block_n, padded // ROW_TILE, dk // block_k)
    x = jnp.pad(x, [(0, padded - rows), (0, 0)])
    partials = row_matmul_partials(x, head, splits=splits, interpret=interpret, config=config, block_n=block_n,
                                   block_k=block_k, block_m=ROW_TILE)
    return partials.sum(0)[:rows]


def _kernel_logits_fwd(x, head, interpret, config):
    return kernel_logits(x, head, interpret, config), (x, head)


def _kernel_logits_bwd(interpret, config, residuals, grad):
    x, head = residuals
    dx = jnp.dot(grad, head.T.astype(jnp.float32)).astype(x.dtype)
    dhead = jnp.dot(x.T.astype(jnp.float32), grad).astype(head.dtype)
    return dx, dhead


kernel_logits.defvjp(_kernel_logits_fwd, _kernel_logits_bwd)
