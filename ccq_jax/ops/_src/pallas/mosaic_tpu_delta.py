"""The delta rules' chunk factors through the Mosaic TPU state pass (`pallas_kernels.delta_tpu`), under its custom
VJP: what the gated and the generalized delta rule's `pallas_mosaic_tpu` backends share.

The chunk factors (`xla.recurrences.DeltaFactors`: the WY/UT solve T = (I + A)^-1, u_v, w, the
decays, the in-chunk scores) are each XLA chunk form's own (its `reference.chunk_factors`):
independent per chunk, batched matmuls and a triangular solve that XLA runs well on a TPU,
differentiated by autodiff. The sequential part, the state carried across chunks with the
outputs read from it, is the kernel's; its backward recomputes the entering states with the
forward kernel (nothing of size `[B, H, N, K, V]` is kept between forward and backward) and
returns every factor's gradient. The decay goes in per head (`[B, H, N, 1, 1]`) or per key row
of the state (`[B, H, N, Kp, 1]`, the generalized delta rule's per-channel decay).
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels import delta_tpu

from ..xla.chunking import from_chunks
from ..xla.numerics import vary_like
from .layout import pad_state
from .mosaic_tpu import lanes

f32 = jnp.float32


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9))
def state_pass(w, u_v, k_to_end, q_from_start, scores, decay, h0, scale, dtype, interpret):
    """(o [B, H, N, C, Vp] fp32, final state) of the chunk factors (padded to lanes) from h0."""
    return delta_tpu.forward(w, u_v, k_to_end, q_from_start, scores, decay, h0, scale=scale, dtype=dtype,
                             emit_states=False, interpret=interpret)


def _vjp_forward(*args):
    return state_pass(*args), args[:7]


def _vjp_backward(scale, dtype, interpret, residuals, cotangents):
    do, dfinal = cotangents
    *factors, h0 = residuals
    _, _, states = delta_tpu.forward(*factors, h0, scale=scale, dtype=dtype, emit_states=True, interpret=interpret)
    return delta_tpu.backward(*factors, states, do.astype(f32), dfinal.astype(f32), scale=scale, dtype=dtype,
                              interpret=interpret)


state_pass.defvjp(_vjp_forward, _vjp_backward)


def delta_rule(factors, initial_state, *, scale, dtype, length, interpret):
    """(o [B, T, H, V] fp32, final state [B, H, K, V]) of `DeltaFactors` (decay [B, H, N] per head or [B, H, N, K]
    per key channel) from `initial_state`, T = length; dtype: the output path's operand dtype."""
    u_v, w, k_to_end, decay, q_from_start, scores = factors
    dk, dv = w.shape[-1], u_v.shape[-1]
    kp, vp = lanes(dk), lanes(dv)
    to = lambda x, width: jnp.pad(x.astype(f32), [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])])
    rows = lambda d: to(d, kp)[..., None] if d.ndim == 4 else d.astype(f32)[..., None, None]  # per key row or head
    padded = (to(w, kp), to(u_v, vp), to(k_to_end, kp), to(q_from_start, kp), scores.astype(f32), rows(decay))
    h0 = vary_like(pad_state(initial_state, kp, vp), padded)
    o, final = state_pass(*padded, h0, scale, dtype, interpret)
    return from_chunks(o[..., :dv], length), final[:, :, :dk, :dv]
