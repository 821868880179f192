"""The delta rules' state pass on Mosaic TPU: forward and backward, one kernel each.

The chunkwise forms (the gated and the generalized delta rule's `reference.chunk_factors` in
`ccq_jax.ops._src`) leave one sequential part: with the chunk factors w, u_v, k_to_end,
q_from_start, scores and decay d,

    u_n = u_v,n - w_n S_n,   o_n = scale (q_from_start,n S_n + scores_n u_n),
    S_{n+1} = d_n (.) S_n + k_to_end,n^T u_n.

The kernels run that recurrence with the state in an fp32 VMEM scratch, on the grid (B, H, N):
the two outer axes "parallel", the chunk axis last and "arbitrary"; the backward walks the
chunks in reverse through its index maps and returns the gradients of every factor. Arrays are
`[B, H, N, C, W]` with W padded to 128 lanes; d is `[B, H, N, 1, 1]` (one decay per head and
chunk: the gated delta rule) or `[B, H, N, Kp, 1]` (one per key row of the state: the
generalized delta rule's per-channel decay), and its gradient comes in d's shape.

Precision, per product: the state's own path (w S, k_to_end^T u and their gradients) in fp32
(HIGHEST: 6-pass bf16 on the MXU), because its rounding compounds from chunk to chunk; the
output's path (q S, scores u and their gradients) with operands in the inputs' dtype and fp32
accumulation, as the XLA chunk form rounds them.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels.tiles import varying_outputs
from pallas_kernels.tpu import cost_estimate, dot, interpret_params, sequential_params

f32 = jnp.float32


def _forward_kernel(w_ref, uv_ref, ke_ref, qs_ref, p_ref, d_ref, h0_ref, o_ref, final_ref, *rest, scale, dtype,
                    emit_states):
    states_ref, state = rest if emit_states else (None, *rest)

    @pl.when(pl.program_id(2) == 0)
    def _():
        state[...] = h0_ref[...]

    S = state[...]
    if emit_states:
        states_ref[...] = S
    u = uv_ref[...] - dot(w_ref[...], S, f32)
    o = scale * (dot(qs_ref[...], S, dtype) + dot(p_ref[...], u, dtype))
    o_ref[...] = o.astype(o_ref.dtype)
    state[...] = d_ref[...] * S + dot(ke_ref[...], u, f32, trans_a=True)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        final_ref[...] = state[...]


def _backward_kernel(w_ref, uv_ref, ke_ref, qs_ref, p_ref, d_ref, states_ref, do_ref, dfinal_ref,
                     dw_ref, duv_ref, dke_ref, dqs_ref, dp_ref, dd_ref, dh0_ref, dstate, *, scale, dtype):
    @pl.when(pl.program_id(2) == 0)
    def _():
        dstate[...] = dfinal_ref[...]

    w, ke, qs, P, do = w_ref[...], ke_ref[...], qs_ref[...], p_ref[...], do_ref[...]
    S, dS = states_ref[...], dstate[...]  # dS: the gradient of the state leaving the chunk
    u = uv_ref[...] - dot(w, S, f32)
    du = scale * dot(P, do, dtype, trans_a=True) + dot(ke, dS, f32)
    duv_ref[...] = du
    dw_ref[...] = -dot(du, S, f32, trans_b=True)
    dke_ref[...] = dot(u, dS, f32, trans_b=True)
    dqs_ref[...] = scale * dot(do, S, dtype, trans_b=True)
    dp_ref[...] = scale * dot(do, u, dtype, trans_b=True)
    dd = jnp.sum(S * dS, axis=1, keepdims=True)  # [Kp, 1]: per key row
    dd_ref[...] = dd if d_ref.shape[0] > 1 else jnp.sum(dd, axis=0, keepdims=True)
    dstate[...] = d_ref[...] * dS + scale * dot(qs, do, dtype, trans_a=True) - dot(w, du, f32, trans_a=True)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        dh0_ref[...] = dstate[...]


def forward_flops(chunk, kp, vp):
    """One forward grid step: w S, q S, k_to_end^T u and scores u."""
    return 6 * chunk * kp * vp + 2 * chunk * chunk * vp


def backward_flops(chunk, kp, vp):
    """One backward grid step: six state-sized products and two chunk-by-chunk ones."""
    return 12 * chunk * kp * vp + 4 * chunk * chunk * vp


def _specs(chunk, kp, vp, n, rows, reverse):
    """rows: the decay's (1 per head, Kp per key row)."""
    at = (lambda i: n - 1 - i) if reverse else (lambda i: i)
    per_chunk = lambda *block: pl.BlockSpec((None, None, None, *block), lambda b, h, i: (b, h, at(i), 0, 0))
    return dict(keys=per_chunk(chunk, kp), values=per_chunk(chunk, vp), scores=per_chunk(chunk, chunk),
                decay=per_chunk(rows, 1), chunk_state=per_chunk(kp, vp),
                state=pl.BlockSpec((None, None, kp, vp), lambda b, h, i: (b, h, 0, 0)))


@functools.partial(jax.jit, static_argnames=("scale", "dtype", "emit_states", "interpret"))
def forward(w, u_v, k_to_end, q_from_start, scores, decay, h0, *, scale, dtype, emit_states, interpret):
    """(o [B, H, N, C, Vp] fp32, final state fp32, entering states [B, H, N, Kp, Vp] when `emit_states`);
    dtype: the output path's operand dtype."""
    b, h, n, chunk, kp = w.shape
    vp = u_v.shape[-1]
    s = _specs(chunk, kp, vp, n, decay.shape[-2], reverse=False)
    args = (w, u_v, k_to_end, q_from_start, scores, decay, h0)
    out_shape = [jax.ShapeDtypeStruct(u_v.shape, f32), jax.ShapeDtypeStruct((b, h, kp, vp), f32)]
    out_specs = [s["values"], s["state"]]
    if emit_states:
        out_shape.append(jax.ShapeDtypeStruct((b, h, n, kp, vp), f32))
        out_specs.append(s["chunk_state"])
    return pl.pallas_call(
        functools.partial(_forward_kernel, scale=scale, dtype=dtype, emit_states=emit_states),
        grid=(b, h, n),
        in_specs=[s["keys"], s["values"], s["keys"], s["keys"], s["scores"], s["decay"], s["state"]],
        out_specs=out_specs, out_shape=varying_outputs(out_shape, args), scratch_shapes=[pltpu.VMEM((kp, vp), f32)],
        compiler_params=sequential_params(), interpret=interpret_params(interpret), name="delta_tpu_forward",
        cost_estimate=cost_estimate(args, out_shape, b * h * n, forward_flops(chunk, kp, vp)),
    )(*args)


@functools.partial(jax.jit, static_argnames=("scale", "dtype", "interpret"))
def backward(w, u_v, k_to_end, q_from_start, scores, decay, states, do, dfinal, *, scale, dtype, interpret):
    """(dw, du_v, dk_to_end, dq_from_start, dscores, ddecay (in decay's shape), dh0), all fp32, the chunks walked in
    reverse."""
    b, h, n, chunk, kp = w.shape
    vp = u_v.shape[-1]
    s = _specs(chunk, kp, vp, n, decay.shape[-2], reverse=True)
    like = lambda x: jax.ShapeDtypeStruct(x.shape, f32)
    args = (w, u_v, k_to_end, q_from_start, scores, decay, states, do, dfinal)
    out_shape = [like(w), like(u_v), like(k_to_end), like(q_from_start), like(scores), like(decay),
                 jax.ShapeDtypeStruct((b, h, kp, vp), f32)]
    return pl.pallas_call(
        functools.partial(_backward_kernel, scale=scale, dtype=dtype),
        grid=(b, h, n),
        in_specs=[s["keys"], s["values"], s["keys"], s["keys"], s["scores"], s["decay"], s["chunk_state"],
                  s["values"], s["state"]],
        out_specs=[s["keys"], s["values"], s["keys"], s["keys"], s["scores"], s["decay"], s["state"]],
        out_shape=varying_outputs(out_shape, args), scratch_shapes=[pltpu.VMEM((kp, vp), f32)],
        compiler_params=sequential_params(), interpret=interpret_params(interpret), name="delta_tpu_backward",
        cost_estimate=cost_estimate(args, out_shape, b * h * n, backward_flops(chunk, kp, vp)),
    )(*args)
