"""The per-chunk WY/UT form of the gated delta rule in one kernel (fla's `chunk_scaled_dot_kkt`, `solve_tril`
and `recompute_w_u` together): for each chunk,

    A_ij = beta_i (k_i . k_j) exp(G_i - G_j)   for j < i in one document (0 elsewhere),
    T = (I + A)^-1,   w = T (beta exp(G) reads k),   u = T (beta v).

One program per (chunk, batch * head), everything on 16 x 16 blocks held in registers: A's blocks
come from [16, K] key tiles, each diagonal block of T by forward substitution (row r of the inverse
is e_r - sum_{j<r} A_rj (row j)), the blocks below the diagonal block row by block row,
T_ij = -T_ii sum_{j <= m < i} A_im T_mj (a blocked triangular solve, as stable as one, in fp32),
then w and u by [16, 16] x [16, BD] products. T enters those products in the inputs' dtype (bf16
inputs: bf16 operands with fp32 accumulation, as fla's `recompute_w_u`; fp32 inputs: IEEE fp32).
Layouts as in `linear_attention`; gates per head (`G [B, Tp, H]`, the inclusive in-chunk cumsum).
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels._tiles import SUB, dot, iota, launch, masked_exp
from pallas_kernels.linear_attention import block

f32 = jnp.float32


def _unit_lower_inverse(a):
    """(I + a)^-1 of a strictly lower triangular [SUB, SUB] fp32 tile, by forward substitution on registers."""
    i = iota(SUB)

    def row(r, x):
        a_r = jnp.sum(jnp.where(i[:, None] == r, a, 0.0), axis=0)  # row r of a: zero from column r on
        new = (i == r).astype(f32) - jnp.sum(a_r[:, None] * x, axis=0)
        return jnp.where(i[:, None] == r, new[None, :], x)

    return jax.lax.fori_loop(1, SUB, row, (i[:, None] == i[None, :]).astype(f32))


def wy_representation(k, v, g, beta, reads, dd, *, chunk, interpret):
    """(w [B, Tp, H, K], u [B, Tp, H, V]) in k's dtype; g: the per-head in-chunk cumsum G, fp32; beta [B, Tp, H]."""
    b_, tp, heads, dk = k.shape
    dv = v.shape[-1]
    blocks = chunk // SUB
    dtype = k.dtype

    def kernel(k_ref, v_ref, g_ref, beta_ref, r_ref, dd_ref, w_ref, u_ref):
        n, bh = pl.program_id(0), pl.program_id(1)
        b, h = bh // heads, bh % heads
        span = lambda i: pl.ds(n * chunk + i * SUB, SUB)
        G = [g_ref[b, span(i), h] for i in range(blocks)]
        beta_ = [beta_ref[b, span(i), h].astype(f32) for i in range(blocks)]
        doc = [dd_ref[b, span(i)] for i in range(blocks)]
        keys = [k_ref[b, span(i), h, pl.ds(0, dk)] for i in range(blocks)]
        j16 = iota(SUB)

        def a_block(i, j):  # A's block (rows of sub-block i, columns of sub-block j), j <= i
            allowed = doc[i][:, None] == doc[j][None, :]
            if i == j:
                allowed &= j16[:, None] > j16[None, :]
            decay = masked_exp(G[i][:, None] - G[j][None, :], allowed)
            return beta_[i][:, None] * dot(keys[i], keys[j], trans_b=True) * decay

        A = {(i, j): a_block(i, j) for i in range(blocks) for j in range(i + 1)}
        T = {}
        for i in range(blocks):
            T[i, i] = _unit_lower_inverse(A[i, i])
            for j in range(i - 1, -1, -1):
                acc = sum(dot(A[i, m], T[m, j]) for m in range(j, i))
                T[i, j] = -dot(T[i, i], acc)
        T = {ij: t.astype(dtype) for ij, t in T.items()}

        def apply(out_ref, src_ref, width, factor):  # out = T (factor * src), a [16, BD] tile at a time
            bd = block(width, 128)
            for ct in range(width // bd):
                cols = pl.ds(ct * bd, bd)
                rhs = [(src_ref[b, span(j), h, cols].astype(f32) * factor[j][:, None]).astype(dtype)
                       for j in range(blocks)]
                for i in range(blocks):
                    acc = sum(dot(T[i, j], rhs[j]) for j in range(i + 1))
                    out_ref[b, span(i), h, cols] = acc.astype(out_ref.dtype)

        apply(u_ref, v_ref, dv, beta_)
        apply(w_ref, k_ref, dk, [beta_[i] * jnp.exp(G[i]) * r_ref[b, span(i)] for i in range(blocks)])

    outs = (jax.ShapeDtypeStruct(k.shape, dtype), jax.ShapeDtypeStruct(v.shape, dtype))
    return launch(kernel, outs, (tp // chunk, b_ * heads), interpret=interpret, name="wy_representation")(
        k, v, g, beta, reads, dd)


__all__ = ["wy_representation"]
