"""The delta rules' chunk factors through a state-pass kernel under one custom VJP: what the gated and the
generalized delta rule's `pallas_mosaic_tpu` backends, and the generalized rule's `pallas_triton`, share.

The chunk factors (`xla.recurrences.DeltaFactors`: the WY/UT solve T = (I + A)^-1, u_v, w, the
decays, the in-chunk scores) are each XLA chunk form's own (its `reference.chunk_factors`):
independent per chunk, batched matmuls and a triangular solve that XLA runs well,
differentiated by autodiff. The sequential part, the state carried across chunks with the
outputs read from it, is the kernel's; its backward recomputes the entering states with the
forward kernel (nothing of size `[B, H, N, K, V]` is kept between forward and backward) and
returns every factor's gradient. The decay goes in per head (`[B, H, N, 1, 1]`) or per key row
of the state (`[B, H, N, Kp, 1]`, the generalized delta rule's per-channel decay).

The kernels are a `PassKernels` value: `TPU` (`pallas_kernels.delta_tpu`, widths padded to the
TPU's lanes) or `triton(config)` (`pallas_kernels.delta_pass`, widths padded to powers of two).
"""

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from pallas_kernels import delta_pass, delta_tpu

from ..residuals import kept
from ..xla.chunking import from_chunks
from ..xla.numerics import vary_like
from .layout import pad_state, width
from .mosaic_tpu import lanes

f32 = jnp.float32


class PassKernels(NamedTuple):
    """One backend's state pass: forward(w, u_v, k_to_end, q_from_start, scores, decay, h0, *, scale, dtype,
    emit_states, interpret) -> (o, final[, states]); backward(the factors, states, do, dfinal, *, scale, dtype,
    interpret) -> every factor's gradient and dh0; pad(d): the padded width of a feature axis of width d;
    input_dtype: whether the factors (all but the decay) go in the inputs' dtype (else fp32)."""

    forward: Callable
    backward: Callable
    pad: Callable
    input_dtype: bool


TPU = PassKernels(delta_tpu.forward, delta_tpu.backward, lanes, input_dtype=False)


@functools.cache
def triton(config) -> PassKernels:
    """The Triton kernels at the tiling `config` (a `KernelConfig`), one value per config (a static argument)."""
    return PassKernels(functools.partial(delta_pass.forward, config=config),
                       functools.partial(delta_pass.backward, config=config), width, input_dtype=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def state_pass(w, u_v, k_to_end, q_from_start, scores, decay, h0, kernels, scale, dtype, interpret):
    """(o [B, H, N, C, Vp] fp32, final state) of the chunk factors (padded) from h0."""
    return kernels.forward(w, u_v, k_to_end, q_from_start, scores, decay, h0, scale=scale, dtype=dtype,
                           emit_states=False, interpret=interpret)


def _vjp_forward(*args):
    # the factors are XLA's work (the WY solves): kept, not formed again under a remat policy that saves `KEPT`
    return state_pass(*args), kept(args[:7])


def _vjp_backward(kernels, scale, dtype, interpret, residuals, cotangents):
    do, dfinal = cotangents
    *factors, h0 = residuals
    _, _, states = kernels.forward(*factors, h0, scale=scale, dtype=dtype, emit_states=True, interpret=interpret)
    grads = kernels.backward(*factors, states, do.astype(f32), dfinal.astype(f32), scale=scale, dtype=dtype,
                             interpret=interpret)
    return tuple(g.astype(x.dtype) for g, x in zip(grads, residuals))


state_pass.defvjp(_vjp_forward, _vjp_backward)


def delta_rule(factors, initial_state, *, kernels, scale, dtype, length, interpret):
    """(o [B, T, H, V] fp32, final state [B, H, K, V]) of `DeltaFactors` (decay [B, H, N] per head or [B, H, N, K]
    per key channel) from `initial_state` through `kernels`, T = length; dtype: the output path's operand dtype."""
    u_v, w, k_to_end, decay, q_from_start, scores = factors
    dk, dv = w.shape[-1], u_v.shape[-1]
    kp, vp = kernels.pad(dk), kernels.pad(dv)
    kept = dtype if kernels.input_dtype else f32
    to = lambda x, size, d=kept: jnp.pad(x.astype(d), [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])
    rows = lambda d: to(d, kp, f32)[..., None] if d.ndim == 4 else d.astype(f32)[..., None, None]  # per key row/head
    padded = (to(w, kp), to(u_v, vp), to(k_to_end, kp), to(q_from_start, kp), scores.astype(kept), rows(decay))
    h0 = vary_like(pad_state(initial_state, kp, vp), padded)
    o, final = state_pass(*padded, h0, kernels, scale, dtype, interpret)
    return from_chunks(o[..., :dv], length), final[:, :, :dk, :dv]
