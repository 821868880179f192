"""Logits of a few rows against the LM head, on XLA's GEMM or on the row-matmul kernel (`pallas_kernels.row_matmul`).

    logits = head_logits(x, head, impl="pallas")   # x [..., D], at most MAX_ROWS rows; head [D, vocab]

A decode step multiplies one or two rows by the whole head (131 MB for gla-1.3b): the product is bound by the
head's bytes, and XLA's GEMM read them at a quarter of an H100's HBM rate. The kernel splits the product over
enough programs to aim at that rate (not yet timed on a GPU: docs/benchmarks.md). impl="xla" is `jnp.dot` (any
number of rows). impl="pallas" follows the Triton backends' platform policy (`dispatch.triton_support`): compiled on
a GPU, interpreted on a CPU or wherever interpret=True asks, a ValueError elsewhere (no Mosaic TPU form).
Differentiable: the backward is XLA's two GEMMs (the kernel serves the forward of few rows only).
"""

import jax.numpy as jnp

from ..dispatch import call_of, interprets, kernel_config, triton_support
from .pallas_triton import kernel_logits

HEAD_IMPLS = ("xla", "pallas")
MAX_ROWS = 64  # the kernel's row tiles; more rows are a GEMM that XLA's tiling already serves


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
    logits = kernel_logits(flat, head.astype(call.dtype), interprets(call), kernel_config(config))
    return logits.astype(call.dtype).reshape(*x.shape[:-1], -1)
