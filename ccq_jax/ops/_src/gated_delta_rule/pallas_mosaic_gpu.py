"""The gated delta rule with its three state passes in Mosaic GPU (`pallas_kernels.mosaic_delta_states`: TMA
loads and wgmma, warp-specialized) and the rest on the Triton kernels, under `pallas_triton`'s custom VJP.

It takes bf16/fp16 inputs on a GPU whose padded K is a multiple of 128 and V of the Mosaic kernels' columns,
at 64-token chunks; `supports` names what a call lacks (impl="pallas" then falls through to Triton).
Mosaic GPU's interpreter stops at these kernels' wgmma, so nothing here runs interpreted.
"""

import jax

from pallas_kernels import mosaic_delta_states as mosaic

from ..dispatch import compiles_for_gpu
from ..pallas.layout import width
from ..xla.numerics import vary_like
from .pallas_triton import StatePasses, with_passes


# Mosaic GPU kernels' outputs carry no varying-axes type: each pass's are cast to vary like its inputs inside
# `jax.shard_map` (as `tiles.launch` marks the Triton kernels'), so that the custom VJP's types match


def _forward_pass(w, u, k, write, decay, h0, chunk, store, run):
    return vary_like(mosaic.state_pass(w, u, k, write, decay, h0, chunk=chunk, store=store), w, u, k, h0)


def _recompute_pass(v_new, k, write, decay, h0, chunk, store, run):
    return vary_like(mosaic.state_pass(None, v_new, k, write, decay, h0, chunk=chunk, store=store)[0], v_new, k, h0)


def _gradient_pass(q, k, w, do, dv_local, read, write, decay, dfinal, chunk, scale, store, run):
    return vary_like(mosaic.state_gradient_pass(q, k, w, do, dv_local, read, write, decay, dfinal, chunk=chunk,
                                                scale=scale, store=store), q, k, w, do, dfinal)


MOSAIC_GPU_PASSES = StatePasses(_forward_pass, _recompute_pass, _gradient_pass)


def supports(call):
    """None when the Mosaic GPU state passes take `call` (a `dispatch.Call`), else why not."""
    if not compiles_for_gpu(call):
        return "the Mosaic GPU kernels compile for a GPU only (no interpreter runs them)"
    chunk = 64 if call.chunk_size is None else call.chunk_size
    shape = lambda d: jax.ShapeDtypeStruct((1, chunk, 1, width(d)), call.dtype)
    if not mosaic.supports(shape(call.key_width), shape(call.value_width), chunk, call.dtype):
        return (f"the Mosaic GPU state passes take bf16/fp16 inputs, padded K and V multiples of 128 and 64-token "
                f"chunks; got {jax.numpy.dtype(call.dtype).name}, K={call.key_width}, V={call.value_width}, "
                f"chunk={chunk}")
    return None


gated_delta_rule = with_passes(MOSAIC_GPU_PASSES)
