"""The gated delta rule on the Mosaic TPU state pass (`pallas_kernels.delta_tpu`), under its custom VJP.

The chunk factors (the WY/UT solve T = (I + A)^-1, u_v, w, the decays, the in-chunk scores)
are the XLA chunk form's own (`reference.chunk_factors`): independent per chunk, batched matmuls
and a triangular solve that XLA runs well on a TPU, differentiated by autodiff. The sequential
part, the state carried across chunks with the outputs read from it, is the kernel's; its
backward recomputes the entering states with the forward kernel (nothing of size
`[B, H, N, K, V]` is kept between forward and backward) and returns every factor's gradient.
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels import delta_tpu

from ..pallas.layout import check_chunk, pad_state
from ..pallas.mosaic_tpu import lanes, refuse_tiling, supports
from ..xla.chunking import from_chunks
from ..xla.numerics import vary_like
from .reference import chunk_factors

__all__ = ["gated_delta_rule", "supports"]
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


def gated_delta_rule(q, k, v, g, beta, *, scale, initial_state, docs, interpret, config, chunk_size=64):
    """Chunked gated delta rule with its state pass on Mosaic TPU; see `ccq_jax.ops.gated_delta_rule`."""
    refuse_tiling(config)
    chunk = check_chunk(chunk_size, interpret)
    length, dk, dv = q.shape[1], q.shape[-1], v.shape[-1]
    kp, vp = lanes(dk), lanes(dv)
    u_v, w, k_to_end, decay, q_from_start, scores = chunk_factors(q, k, v, g, beta, docs, chunk)
    to = lambda x, width: jnp.pad(x.astype(f32), [(0, 0)] * 4 + [(0, width - x.shape[-1])])
    factors = (to(w, kp), to(u_v, vp), to(k_to_end, kp), to(q_from_start, kp), scores.astype(f32),
               decay.astype(f32)[..., None, None])
    h0 = vary_like(pad_state(initial_state, kp, vp), factors)
    o, final = state_pass(*factors, h0, scale, jnp.result_type(q, k, v), interpret)
    return from_chunks(o[..., :dv], length).astype(v.dtype), final[:, :, :dk, :dv]
