"""What the Mosaic TPU backends share: `supports`, the lane padding, the refusal of a tiling, and GLA's chunked
linear attention on the kernels of `pallas_kernels.gla_tpu` under one custom VJP (`chunked`): GLA's backbone, and
with zero gates and values k^ the CCQ read's covariance term (`ccq_query.pallas_mosaic_tpu`).

The wrapper pads T to a multiple of the chunk and K, V to multiples of 128 (the TPU's lanes),
moves heads before time (`[B, H, Tp, Kp]`: each grid step reads one (8, 128)-tiled block),
forms the gates' in-chunk cumsum G in fp32 and the document masks, and cuts the padding off
again. The backward recomputes the chunks' entering states with the forward kernel (nothing of
size `[B, H, N, K, V]` is kept between forward and backward), then runs the backward kernel.

The gates' gradient needs no kernel of its own: every path from g to the loss goes through
exp(Gamma_i - Gamma_j) with a query or the final state at i and a key or the initial state at
j (Gamma the cumsum of g inside a document), so dL/dGamma_t = q_t * dq_t - k_t * dk_t, plus
sum_v S_T * dS_T at the sequence's end, and dg_t is the sum of dL/dGamma_s over the later
tokens s of t's document (0 at a document's first token, where g multiplies a discarded state).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from pallas_kernels import gla_tpu
from pallas_kernels.tiles import DEFAULT_CONFIG
from pallas_kernels.tpu import LANES

from ..dispatch import Call
from ..residuals import kept
from ..xla.numerics import vary_like
from ..xla.recurrences import diagonal_scan
from .layout import chunk_cumsum, check_chunk, layout, pad, pad_state

f32 = jnp.float32


def supports(call: Call) -> str | None:
    """Compiled on a TPU (or for one, ahead of time: interpret=False on a CPU), interpreted on a CPU."""
    if call.platform in ("tpu", "cpu") or call.interpret:
        return None
    return (f"the Mosaic TPU kernels compile for a TPU only, and interpreted on a {call.platform} they would be the "
            f"slowest path there is (ask for that with interpret=True)")


class Masks(NamedTuple):
    """The document layout in the kernels' shapes (see `pallas_kernels.gla_tpu`), and the document index [B, Tp]."""

    reads: jax.Array
    writes: jax.Array
    keep: jax.Array
    ddc: jax.Array
    ddr: jax.Array
    docs: jax.Array


def masks(docs, chunk) -> Masks:
    lay = layout(docs, chunk)
    b, tp = lay.dd.shape
    return Masks(lay.reads[..., None], lay.writes[..., None], lay.keep[..., None, None], lay.dd[..., None],
                 lay.dd.reshape(b, tp // chunk, 1, chunk), lay.dd)


def lanes(d):
    """d rounded up to a multiple of the TPU's 128 lanes."""
    return -(-d // LANES) * LANES


def _gates(g, chunk):
    """(G [B, H, Tp, Kp] fp32, its last row per chunk as columns [B, H, N, Kp, 1]) of the kernel-layout gates."""
    G = jnp.moveaxis(chunk_cumsum(jnp.moveaxis(g, 1, 2), chunk), 2, 1)
    return G, G[:, :, chunk - 1::chunk, :, None]


def _segmented_suffix_sums(x, docs):
    """sum_{s >= t, docs[s] == docs[t]} x_s along axis 2 of x [B, H, Tp, K], docs [B, Tp]: the linear recurrence
    h_t = [t is not its document's last token] h_{t+1} + x_t, run backwards (`recurrences.diagonal_scan`)."""
    continues = jnp.concatenate([docs[:, 1:] == docs[:, :-1], jnp.zeros_like(docs[:, :1], bool)], axis=1)
    flip = lambda a: jnp.flip(a, 1)
    time_second = jnp.moveaxis(x, 2, 1)  # [B, Tp, H, K]
    sums = flip(diagonal_scan(flip(continues.astype(x.dtype)), flip(time_second)))
    return jnp.moveaxis(sums, 1, 2)


def refuse_tiling(config):
    """The TPU kernels take their blocks from the chunk and the padded K and V: a `KernelConfig` other than the
    default (the Triton tiling) is a ValueError."""
    if config != DEFAULT_CONFIG:
        raise ValueError(f"config: the Mosaic TPU kernels take no KernelConfig (their blocks are the chunk and the "
                         f"padded K and V), got {config!r}")


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def linear_attention(q, k, v, g, h0, lay, scale, chunk, interpret):
    """(o [B, H, Tp, Vp], final state) of GLA on kernel-layout inputs; g: the log gates [B, H, Tp, Kp] fp32."""
    G, last = _gates(g, chunk)
    o, final = gla_tpu.forward(q, k, v, G, last, h0, *lay[:5], scale=scale, chunk=chunk, emit_states=False,
                               interpret=interpret)
    return o, final


def _vjp_forward(q, k, v, g, h0, lay, scale, chunk, interpret):
    out = linear_attention(q, k, v, g, h0, lay, scale, chunk, interpret)
    return out, (q, k, v, g, h0, lay, kept(out[1]))


def _vjp_backward(scale, chunk, interpret, residuals, cotangents):
    q, k, v, g, h0, lay, final = residuals
    do, dfinal = cotangents
    G, last = _gates(g, chunk)
    _, _, states = gla_tpu.forward(q, k, v, G, last, h0, *lay[:5], scale=scale, chunk=chunk, emit_states=True,
                                   interpret=interpret)
    dq, dk, dv, dh0 = gla_tpu.backward(q, k, v, G, last, states, do, dfinal.astype(f32), *lay[:5], scale=scale,
                                       chunk=chunk, interpret=interpret)
    dgamma = q.astype(f32) * dq - k.astype(f32) * dk
    dgamma = dgamma.at[:, :, -1].add(jnp.sum(final * dfinal, axis=-1))
    starts = jnp.concatenate([jnp.zeros_like(lay.docs[:, :1], bool), lay.docs[:, 1:] != lay.docs[:, :-1]], axis=1)
    dg = jnp.where(starts[:, None, :, None], 0.0, _segmented_suffix_sums(dgamma, lay.docs))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv, dg, dh0, None


linear_attention.defvjp(_vjp_forward, _vjp_backward)


def chunked(q, k, v, g, *, scale, initial_state, docs, interpret, config, chunk_size=64):
    """Chunked GLA (per-channel log gates g) on the Mosaic TPU kernels; see `ccq_jax.ops.gla` (`refuse_tiling` for
    `config`)."""
    refuse_tiling(config)
    t, dk, dv = q.shape[1], q.shape[-1], v.shape[-1]
    chunk = check_chunk(chunk_size, interpret)
    tp, kp, vp = t + (-t % chunk), lanes(dk), lanes(dv)
    dtype = jnp.result_type(q, k, v)
    heads_first = lambda x, width: jnp.moveaxis(pad(x, tp, width), 2, 1)
    qh, kh, vh = (heads_first(x.astype(dtype), w) for x, w in ((q, kp), (k, kp), (v, vp)))
    # the state and the gates (zeros for the CCQ covariance) vary like q, k, v inside shard_map: the custom VJP's
    # cotangents must match its inputs
    h0, gh = vary_like((pad_state(initial_state, kp, vp), heads_first(g.astype(f32), kp)), [qh, kh, vh])
    o, final = linear_attention(qh, kh, vh, gh, h0, masks(docs, chunk), scale, chunk, interpret)
    return jnp.moveaxis(o, 1, 2)[:, :t, :, :dv], final[:, :, :dk, :dv]
