"""Chunked GLA on Mosaic TPU: the forward pass and the backward pass, one kernel each.

Arrays in, arrays out, in the kernels' layout `[B, H, Tp, Kp]` (Tp a multiple of the chunk C,
Kp and Vp multiples of 128: the wrapper pads and transposes). The grid is (B, H, N): the two
outer axes "parallel", the chunk axis last and "arbitrary", so one core walks a (b, h) pair's
chunks in order with the running state in an fp32 VMEM scratch, set from h0 (forward) or the
final state's cotangent (backward) under `pl.when` at the first step. The backward walks the
chunks in reverse through its index maps.

Decays. G is the inclusive cumsum of the log gates inside each chunk (fp32, formed by the
wrapper). Every exponent a kernel takes is <= 0: across sub-blocks of `SUB` rows a decay
exp(G_i - G_j) factors through a reference row between j and i (the start of i's sub-block for
scores and dq, the end of j's for dk), and inside a sub-block each pair is formed exactly, one
key row at a time. So strong decay underflows to 0 and never overflows.

Precision, per product: operands in the inputs' dtype with fp32 accumulation (bf16 on the MXU
for bf16 inputs, fla's choice); fp32 inputs at HIGHEST precision (6-pass bf16, fp32-exact
enough for the float64 checks). Gate-scaled operands are formed in fp32 and rounded once to
the operand dtype.

Documents: `reads` [B, Tp, 1] (the token belongs to the document of the entering state),
`writes` [B, Tp, 1] (real token of the chunk's last document), `keep` [B, N, 1, 1] (no document
starts inside the chunk) and the document index as a column `[B, Tp, 1]` and a row
`[B, N, 1, C]` for the in-chunk causal mask.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels.tiles import varying_outputs
from pallas_kernels.tpu import cost_estimate, dot, interpret_params, sequential_params

f32 = jnp.float32
SUB = 16  # rows per sub-block: bf16 packs 16 rows per VMEM tile
NEG = -jnp.inf


def _iota(shape, axis):
    return jax.lax.broadcasted_iota(jnp.int32, shape, axis)


def _row_decays(G, ref, before):
    """exp(ref - G_j) for rows j < `before` (<= 1: G falls along the chunk), 0 for the others. G [C, K], ref [1, K]."""
    rows = _iota(G.shape, 0)
    return jnp.exp(jnp.where(rows < before, ref - G, NEG))


def _col_decays(G, ref, after):
    """exp(G_i - ref) for rows i > `after`, 0 for the others."""
    rows = _iota(G.shape, 0)
    return jnp.exp(jnp.where(rows > after, G - ref, NEG))


def gated_scores(q, k, G, dtype):
    """A[i, j] = sum_k q_ik k_jk exp(G_ik - G_jk) for j <= i, 0 above the diagonal; q, k, G [C, K] -> fp32 [C, C]."""
    chunk = q.shape[0]
    q, k = q.astype(f32), k.astype(f32)
    cols = _iota((SUB, chunk), 1)
    blocks = []
    for r0 in range(0, chunk, SUB):
        qi, gi = q[r0:r0 + SUB], G[r0:r0 + SUB]
        ref = G[r0:r0 + 1]
        rows = jnp.zeros((SUB, chunk), f32)
        if r0:  # keys of earlier sub-blocks, through the reference row r0
            rows = dot(qi * jnp.exp(gi - ref), k * _row_decays(G, ref, r0), dtype, trans_b=True)
        local = _iota((SUB, 1), 0)
        for j in range(SUB):  # the sub-block's own keys, one at a time, each pairwise decay exact
            kj, gj = k[r0 + j:r0 + j + 1], G[r0 + j:r0 + j + 1]
            decay = jnp.exp(jnp.where(local >= j, gi - gj, NEG))
            col = jnp.sum(qi * kj * decay, axis=1, keepdims=True)
            rows = rows + jnp.where(cols == r0 + j, col, 0.0)
        blocks.append(rows)
    return jnp.concatenate(blocks, axis=0)


def gated_apply(P, x, G, dtype, transposed=False):
    """out_ik = sum_{j <= i} P_ij x_jk exp(G_ik - G_jk) (P's lower triangle read); transposed (P[j, i] = the
    scores' [i, j], its upper triangle read): out_jk = sum_{i >= j} P_ji x_ik exp(G_ik - G_jk). P [C, C], x, G
    [C, K] -> fp32 [C, K]. Earlier (later) sub-blocks go through the first (last) row of the output's."""
    chunk = x.shape[0]
    x = x.astype(f32)
    sign = -1.0 if transposed else 1.0  # exp(sign (G_row - G_other)) is the decay between an output row and another
    cols = _iota((SUB, chunk), 1)
    local = _iota((SUB, 1), 0)
    blocks = []
    for r0 in range(0, chunk, SUB):
        p_rows, g_rows = P[r0:r0 + SUB], G[r0:r0 + SUB]
        r_ref = r0 + SUB - 1 if transposed else r0
        ref = G[r_ref:r_ref + 1]
        out = jnp.zeros((SUB, x.shape[1]), f32)
        if (r_ref < chunk - 1) if transposed else r0:
            others = _col_decays(G, ref, r_ref) if transposed else _row_decays(G, ref, r0)
            out = jnp.exp(sign * (g_rows - ref)) * dot(p_rows, x * others, dtype)
        for m in range(SUB):  # the sub-block's own rows, one at a time, each pairwise decay exact
            x_m, g_m = x[r0 + m:r0 + m + 1], G[r0 + m:r0 + m + 1]
            p_m = jnp.sum(jnp.where(cols == r0 + m, p_rows, 0.0), axis=1, keepdims=True)
            near = (local <= m) if transposed else (local >= m)
            out = out + jnp.where(near, p_m * x_m * jnp.exp(jnp.where(near, sign * (g_rows - g_m), NEG)), 0.0)
        blocks.append(out)
    return jnp.concatenate(blocks, axis=0)


def _causal(ddc, ddr, transposed=False):
    """j <= i and the same document at [i, j] ([j, i] when `transposed`): [C, 1] and [1, C] document indices ->
    fp32 [C, C] mask."""
    chunk = ddc.shape[0]
    rows, cols = _iota((chunk, chunk), 0), _iota((chunk, chunk), 1)
    return (((rows <= cols) if transposed else (rows >= cols)) & (ddc == ddr)).astype(f32)


def _forward_kernel(q_ref, k_ref, v_ref, G_ref, last_ref, h0_ref, reads_ref, writes_ref, keep_ref, ddc_ref, ddr_ref,
                    o_ref, final_ref, *rest, scale, emit_states):
    states_ref, state = rest if emit_states else (None, *rest)

    @pl.when(pl.program_id(2) == 0)
    def _():
        state[...] = h0_ref[...]

    dtype = q_ref.dtype
    q, k, v, G = q_ref[...], k_ref[...], v_ref[...], G_ref[...]
    S = state[...]
    if emit_states:
        states_ref[...] = S
    chunk = q.shape[0]
    G_last = G[chunk - 1:chunk]
    A = gated_scores(q, k, G, dtype) * _causal(ddc_ref[...], ddr_ref[...])
    q_read = q.astype(f32) * jnp.exp(G) * reads_ref[...]
    o = scale * (dot(q_read, S, dtype) + dot(A, v, dtype))
    o_ref[...] = o.astype(o_ref.dtype)
    k_write = k.astype(f32) * jnp.exp(G_last - G) * writes_ref[...]
    state[...] = keep_ref[...] * jnp.exp(last_ref[...]) * S + dot(k_write, v, dtype, trans_a=True)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        final_ref[...] = state[...]


def _backward_kernel(q_ref, k_ref, v_ref, G_ref, last_ref, states_ref, do_ref, dfinal_ref, reads_ref, writes_ref,
                     keep_ref, ddc_ref, ddr_ref, dq_ref, dk_ref, dv_ref, dh0_ref, dstate, *, scale):
    @pl.when(pl.program_id(2) == 0)
    def _():
        dstate[...] = dfinal_ref[...]

    dtype = q_ref.dtype
    q, k, v, G, do = q_ref[...], k_ref[...], v_ref[...], G_ref[...], do_ref[...]
    S, dS = states_ref[...], dstate[...]
    chunk = q.shape[0]
    G_last = G[chunk - 1:chunk]
    ddc, ddr = ddc_ref[...], ddr_ref[...]
    causal = _causal(ddc, ddr)
    reads, writes = reads_ref[...], writes_ref[...]
    read_decay = jnp.exp(G) * reads  # [C, K]: the entering state's decay to token i
    write_decay = jnp.exp(G_last - G) * writes  # token j's decay to the chunk's end

    A = scale * gated_scores(q, k, G, dtype) * causal  # o = A v + scale (q read) S
    dA = scale * dot(do, v, dtype, trans_b=True) * causal  # dA[i, j] = scale do_i . v_j
    dAt = scale * dot(v, do, dtype, trans_b=True) * _causal(ddc, ddr, transposed=True)  # dAt[j, i] = dA[i, j]
    dq = gated_apply(dA, k, G, dtype) + scale * read_decay * dot(do, S, dtype, trans_b=True)
    dk = gated_apply(dAt, q, G, dtype, transposed=True) + write_decay * dot(v, dS, dtype, trans_b=True)
    dv = dot(A, do, dtype, trans_a=True) + dot(k.astype(f32) * write_decay, dS, dtype)
    dq_ref[...] = dq.astype(dq_ref.dtype)
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)
    q_read = q.astype(f32) * read_decay
    dstate[...] = keep_ref[...] * jnp.exp(last_ref[...]) * dS + scale * dot(q_read, do, dtype, trans_a=True)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        dh0_ref[...] = dstate[...]


def _gated_cost(chunk, kp):
    """(flops, exps) of one `gated_scores` or `gated_apply`: the off-diagonal products over the whole chunk, the
    diagonal sub-blocks' pairs one key row at a time (4 flops and one exp per element)."""
    blocks = chunk // SUB
    return 2 * chunk * chunk * kp + 4 * SUB * chunk * kp, blocks * (chunk + SUB) * kp + SUB * chunk * kp


def forward_cost(chunk, kp, vp):
    """(flops, exps) of one forward grid step."""
    flops, exps = _gated_cost(chunk, kp)
    return flops + 4 * chunk * kp * vp + 2 * chunk * chunk * vp, exps + 2 * chunk * kp


def backward_cost(chunk, kp, vp):
    """(flops, exps) of one backward grid step: the scores and two gated products, five state products and three
    chunk-by-chunk ones."""
    flops, exps = _gated_cost(chunk, kp)
    return 3 * flops + 8 * chunk * kp * vp + 6 * chunk * chunk * vp, 3 * exps + 2 * chunk * kp


def _specs(chunk, kp, vp, n, reverse):
    """BlockSpecs of the per-chunk operands, chunk n walked forwards or in reverse."""
    at = (lambda i: n - 1 - i) if reverse else (lambda i: i)
    tokens = lambda width: pl.BlockSpec((None, None, chunk, width), lambda b, h, i: (b, h, at(i), 0))
    return dict(
        tokens=tokens,
        last=pl.BlockSpec((None, None, None, kp, 1), lambda b, h, i: (b, h, at(i), 0, 0)),
        state=pl.BlockSpec((None, None, kp, vp), lambda b, h, i: (b, h, 0, 0)),
        chunk_state=pl.BlockSpec((None, None, None, kp, vp), lambda b, h, i: (b, h, at(i), 0, 0)),
        column=pl.BlockSpec((None, chunk, 1), lambda b, h, i: (b, at(i), 0)),
        keep=pl.BlockSpec((None, None, 1, 1), lambda b, h, i: (b, at(i), 0, 0)),
        row=pl.BlockSpec((None, None, 1, chunk), lambda b, h, i: (b, at(i), 0, 0)),
    )


@functools.partial(jax.jit, static_argnames=("scale", "chunk", "emit_states", "interpret"))
def forward(q, k, v, G, last, h0, reads, writes, keep, ddc, ddr, *, scale, chunk, emit_states, interpret):
    """(o [B, H, Tp, Vp] in v's dtype, final state fp32 [B, H, Kp, Vp], entering state of each chunk fp32
    [B, H, N, Kp, Vp] when `emit_states`); last: G's last row per chunk as columns [B, H, N, Kp, 1]."""
    b, h, tp, kp = q.shape
    vp, n = v.shape[-1], tp // chunk
    s = _specs(chunk, kp, vp, n, reverse=False)
    args = (q, k, v, G, last, h0, reads, writes, keep, ddc, ddr)
    out_shape = [jax.ShapeDtypeStruct((b, h, tp, vp), v.dtype), jax.ShapeDtypeStruct((b, h, kp, vp), f32)]
    out_specs = [s["tokens"](vp), s["state"]]
    if emit_states:
        out_shape.append(jax.ShapeDtypeStruct((b, h, n, kp, vp), f32))
        out_specs.append(s["chunk_state"])
    return pl.pallas_call(
        functools.partial(_forward_kernel, scale=scale, emit_states=emit_states),
        grid=(b, h, n),
        in_specs=[s["tokens"](kp), s["tokens"](kp), s["tokens"](vp), s["tokens"](kp), s["last"], s["state"],
                  s["column"], s["column"], s["keep"], s["column"], s["row"]],
        out_specs=out_specs, out_shape=varying_outputs(out_shape, args),
        scratch_shapes=[pltpu.VMEM((kp, vp), f32)],
        compiler_params=sequential_params(), interpret=interpret_params(interpret), name="gla_tpu_forward",
        cost_estimate=cost_estimate(args, out_shape, b * h * n, *forward_cost(chunk, kp, vp)),
    )(*args)


@functools.partial(jax.jit, static_argnames=("scale", "chunk", "interpret"))
def backward(q, k, v, G, last, states, do, dfinal, reads, writes, keep, ddc, ddr, *, scale, chunk, interpret):
    """(dq, dk fp32 (the gates' gradient is formed from them), dv in v's dtype, dh0 fp32) of `forward`'s o and
    final state, the chunks walked in reverse; states: `forward`'s entering states."""
    b, h, tp, kp = q.shape
    vp, n = v.shape[-1], tp // chunk
    s = _specs(chunk, kp, vp, n, reverse=True)
    args = (q, k, v, G, last, states, do, dfinal, reads, writes, keep, ddc, ddr)
    out_shape = [jax.ShapeDtypeStruct(q.shape, f32), jax.ShapeDtypeStruct(k.shape, f32),
                 jax.ShapeDtypeStruct(v.shape, v.dtype), jax.ShapeDtypeStruct((b, h, kp, vp), f32)]
    return pl.pallas_call(
        functools.partial(_backward_kernel, scale=scale),
        grid=(b, h, n),
        in_specs=[s["tokens"](kp), s["tokens"](kp), s["tokens"](vp), s["tokens"](kp), s["last"], s["chunk_state"],
                  s["tokens"](vp), s["state"], s["column"], s["column"], s["keep"], s["column"], s["row"]],
        out_specs=[s["tokens"](kp), s["tokens"](kp), s["tokens"](vp), s["state"]],
        out_shape=varying_outputs(out_shape, args), scratch_shapes=[pltpu.VMEM((kp, vp), f32)],
        compiler_params=sequential_params(), interpret=interpret_params(interpret), name="gla_tpu_backward",
        cost_estimate=cost_estimate(args, out_shape, b * h * n, *backward_cost(chunk, kp, vp)),
    )(*args)
