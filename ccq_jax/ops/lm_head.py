"""Logits of a few rows against the LM head, on XLA's GEMM or on the row-matmul kernel (`pallas_kernels.row_matmul`).

    logits = head_logits(x, head, impl="pallas")   # x [..., D], at most MAX_ROWS rows; head [D, vocab]

A decode step multiplies one or two rows by the whole head (131 MB for gla-1.3b): the product is bound by the
head's bytes, and XLA's GEMM read them at a quarter of an H100's HBM rate. The kernel splits the product over
enough programs to aim at that rate (not yet timed on a GPU: docs/benchmarks.md). impl="xla" is `jnp.dot` (any
number of rows). impl="pallas" follows the Triton backends' platform policy (`ccq_jax.ops.registry`): compiled on
a GPU, interpreted on a CPU or wherever interpret=True asks, a ValueError elsewhere (no Mosaic TPU form).
Differentiable: the backward is XLA's two GEMMs (the kernel serves the forward of few rows only).
"""

import functools

import jax
import jax.numpy as jnp

from ccq_jax.ops.registry import call_of, interprets, kernel_config, triton_support
from pallas_kernels.row_matmul import row_matmul_partials

HEAD_IMPLS = ("xla", "pallas")
MAX_ROWS = 64  # the kernel's row tiles; more rows are a GEMM that XLA's tiling already serves
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


def _check(x, head, impl, interpret, config):
    """The kernel's `Call` (None for impl="xla") once the arguments are checked."""
    if impl not in HEAD_IMPLS:
        raise ValueError(f"impl: expected one of {HEAD_IMPLS}, got {impl!r}")
    if head.ndim != 2 or x.ndim < 1 or x.shape[-1] != head.shape[0]:
        raise ValueError(f"x, head: expected x [..., D] and head [D, vocab], got {x.shape} and {head.shape}")
    for name, a in (("x", x), ("head", head)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise ValueError(f"{name}: expected a floating dtype, got {a.dtype}")
    if impl == "xla":
        if interpret is not None or config is not None:
            raise ValueError("interpret, config: impl='xla' runs no kernel; leave them unset")
        return None
    rows = x.size // x.shape[-1]
    if rows > MAX_ROWS:
        raise ValueError(f"x: impl='pallas' takes at most {MAX_ROWS} rows (a decode step's), got {rows}; use "
                         f"impl='xla'")
    if any(d % 16 for d in head.shape):
        raise ValueError(f"head: impl='pallas' needs both dims multiples of 16, got {head.shape}")
    if kernel_config(config).width is not None and head.shape[1] % config.width:
        raise ValueError(f"config: width {config.width} does not divide the vocabulary {head.shape[1]}")
    call = call_of(x, head, chunk_size=None, interpret=interpret)
    if (reason := triton_support(call)) is not None:
        raise ValueError(f"impl: 'pallas' has no kernel for this call ({reason}); use impl='xla'")
    return call


def head_logits(x, head, *, impl="xla", interpret=None, config=None):
    """x [..., D] @ head [D, vocab] in the inputs' common dtype (as `jnp.dot`: fp32 accumulation, the result
    rounded to that dtype), on XLA's GEMM or the kernel.

    impl: "xla" or "pallas" (the module docstring). interpret: None interprets the kernel on a CPU only; True
    anywhere; False compiles it for a GPU. config: a `KernelConfig` (width: the column tile; warps, stages)."""
    call = _check(x, head, impl, interpret, config)
    if call is None:
        return jnp.dot(x, head)
    flat = x.astype(call.dtype).reshape(-1, x.shape[-1])
    logits = _kernel_logits(flat, head.astype(call.dtype), interprets(call), kernel_config(config))
    return logits.astype(call.dtype).reshape(*x.shape[:-1], -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _kernel_logits(x, head, interpret, config):
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
    return _kernel_logits(x, head, interpret, config), (x, head)


def _kernel_logits_bwd(interpret, config, residuals, grad):
    x, head = residuals
    dx = jnp.dot(grad, head.T.astype(jnp.float32)).astype(x.dtype)
    dhead = jnp.dot(x.T.astype(jnp.float32), grad).astype(head.dtype)
    return dx, dhead


_kernel_logits.defvjp(_kernel_logits_fwd, _kernel_logits_bwd)
