"""The per-chunk WY/UT form of the gated delta rule in one kernel (fla's `chunk_scaled_dot_kkt`, `solve_tril`
and `recompute_w_u` together), and its gradient in another (fla's `prepare_wy_repr_bwd`): for each chunk,

    A_ij = beta_i (k_i . k_j) exp(G_i - G_j)   for j < i in one document (0 elsewhere),
    T = (I + A)^-1,   w = T Kb with Kb = beta exp(G) reads k,   u = T Vb with Vb = beta v.

One program per (chunk, batch * head), everything on 16 x 16 blocks held in registers: A's blocks
come from [16, K] key tiles, each diagonal block of T by forward substitution (row r of the inverse
is e_r - sum_{j<r} A_rj (row j)), the blocks below the diagonal block row by block row,
T_ij = -T_ii sum_{j <= m < i} A_im T_mj (a blocked triangular solve, as stable as one, in fp32),
then w and u by [16, 16] x [16, BD] products. T enters those products in the inputs' dtype (bf16
inputs: bf16 operands with fp32 accumulation, as fla's `recompute_w_u`; fp32 inputs: IEEE fp32).
Layouts as in `linear_attention`; gates per head (`G [B, Tp, H]`, the inclusive in-chunk cumsum).

The gradient recomputes A and T on chip (nothing [C, C] is kept between forward and backward):

    dKb = T^T dw,  dVb = T^T du,  dT = dw Kb^T + du Vb^T,  dA = -T^T dT T^T on A's support,

then through A and Kb, Vb into dk, dv, dbeta and dG. Only dT's blocks on and below the diagonal
enter dA there, so those are the ones formed. K and V are walked in 128-wide column tiles, one
16-row block loaded at a time; the [C, C] algebra (T, dT, dA) stays fp32.
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


def _inverse(A, blocks):
    """The blocks {(i, j): j <= i} of (I + A)^-1, fp32, given A's blocks on and below the diagonal."""
    T = {}
    for i in range(blocks):
        T[i, i] = _unit_lower_inverse(A[i, i])
        for j in range(i - 1, -1, -1):
            acc = sum(dot(A[i, m], T[m, j]) for m in range(j, i))
            T[i, j] = -dot(T[i, i], acc)
    return T


class _Chunk:
    """One program's chunk: per 16-row block its G, beta, document and Kb's row factor (beta exp(G) reads)."""

    def __init__(self, g_ref, beta_ref, r_ref, dd_ref, b, h, n, chunk):
        self.blocks = chunk // SUB
        self.rows = lambda i: pl.ds(n * chunk + i * SUB, SUB)
        ids = range(self.blocks)
        self.G = [g_ref[b, self.rows(i), h] for i in ids]
        self.beta = [beta_ref[b, self.rows(i), h].astype(f32) for i in ids]
        self.doc = [dd_ref[b, self.rows(i)] for i in ids]
        self.read = [r_ref[b, self.rows(i)] for i in ids]
        self.kfac = [self.beta[i] * jnp.exp(self.G[i]) * self.read[i] for i in ids]

    def decay(self, i, j):
        """exp(G_i - G_j) on A's support (block i's rows, block j's columns, j <= i), 0 elsewhere."""
        allowed = self.doc[i][:, None] == self.doc[j][None, :]
        if i == j:
            r = iota(SUB)
            allowed &= r[:, None] > r[None, :]
        return masked_exp(self.G[i][:, None] - self.G[j][None, :], allowed)

    def lower(self):
        """The block pairs (i, j) with j <= i."""
        return [(i, j) for i in range(self.blocks) for j in range(i + 1)]

    def inverse(self, gram):
        """T = (I + A)^-1's blocks, fp32, from the gram (k_i . k_j)'s blocks on and below the diagonal."""
        return _inverse({(i, j): self.beta[i][:, None] * gram[i, j] * self.decay(i, j) for i, j in self.lower()},
                        self.blocks)


def _column_tiles(width):
    """The 128-wide column slices of a feature axis (width: a power of two >= 16)."""
    bd = block(width, 128)
    return [pl.ds(ct * bd, bd) for ct in range(width // bd)]


def wy_representation(k, v, g, beta, reads, dd, *, chunk, interpret):
    """(w [B, Tp, H, K], u [B, Tp, H, V]) in k's dtype; g: the per-head in-chunk cumsum G, fp32; beta [B, Tp, H]."""
    b_, tp, heads, dk = k.shape
    dv = v.shape[-1]
    dtype = k.dtype

    def kernel(k_ref, v_ref, g_ref, beta_ref, r_ref, dd_ref, w_ref, u_ref):
        n, bh = pl.program_id(0), pl.program_id(1)
        b, h = bh // heads, bh % heads
        c = _Chunk(g_ref, beta_ref, r_ref, dd_ref, b, h, n, chunk)
        keys = [k_ref[b, c.rows(i), h, pl.ds(0, dk)] for i in range(c.blocks)]
        T = c.inverse({(i, j): dot(keys[i], keys[j], trans_b=True) for i, j in c.lower()})
        T = {ij: t.astype(dtype) for ij, t in T.items()}

        def apply(out_ref, src_ref, width, factor):  # out = T (factor * src), a [16, BD] tile at a time
            for cols in _column_tiles(width):
                rhs = [(src_ref[b, c.rows(j), h, cols].astype(f32) * factor[j][:, None]).astype(dtype)
                       for j in range(c.blocks)]
                for i in range(c.blocks):
                    acc = sum(dot(T[i, j], rhs[j]) for j in range(i + 1))
                    out_ref[b, c.rows(i), h, cols] = acc.astype(out_ref.dtype)

        apply(u_ref, v_ref, dv, c.beta)
        apply(w_ref, k_ref, dk, c.kfac)

    outs = (jax.ShapeDtypeStruct(k.shape, dtype), jax.ShapeDtypeStruct(v.shape, dtype))
    return launch(kernel, outs, (tp // chunk, b_ * heads), interpret=interpret, name="wy_representation")(
        k, v, g, beta, reads, dd)


def wy_gradient(k, v, g, beta, reads, dd, dw, du, *, chunk, interpret):
    """The gradient of `wy_representation` given the cotangents dw [B, Tp, H, K] and du [B, Tp, H, V] (in k's
    dtype): (dk fp32, dv in v's dtype, dbeta [B, Tp, H] fp32, dG [B, Tp, H] fp32, the gradient w.r.t. the
    in-chunk cumsum G: the caller turns it into one w.r.t. the log gates).

    In order, to keep few blocks alive at once: the gram K K^T (a pass over K), T; dT (a pass over K,
    then one over V that also writes dv = beta T^T du); dA column block by column block, kept as
    D'_ij = dA_ij exp(G_i - G_j), the gradient of beta_i (k_i . k_j); a last pass over K writes
    dk = beta own + other with own = exp(G) reads T^T dw + D' K and other = (beta D')^T K (Kb = beta exp(G)
    reads k), and the row products of those two tiles with K give their shares dbeta += own . k and
    dG = beta own . k - other . k (sum_j D'_ij (k_i . k_j) = k_i . (D' K)_i, so no gram is kept).
    """
    b_, tp, heads, dk = k.shape
    dv = v.shape[-1]
    dtype = k.dtype

    def kernel(k_ref, v_ref, g_ref, beta_ref, r_ref, dd_ref, dw_ref, du_ref, dk_ref, dv_ref, dbeta_ref, dg_ref):
        n, bh = pl.program_id(0), pl.program_id(1)
        b, h = bh // heads, bh % heads
        c = _Chunk(g_ref, beta_ref, r_ref, dd_ref, b, h, n, chunk)
        ids = range(c.blocks)
        load = lambda ref, i, cols: ref[b, c.rows(i), h, cols]
        cast = lambda x: x.astype(dtype)  # operands of the [16, 16] x [16, BD] products
        below = lambda j: range(j, c.blocks)  # the block rows i >= j
        zero = jnp.zeros((SUB, SUB), f32)

        gram = dict.fromkeys(c.lower(), zero)
        for cols in _column_tiles(dk):
            for j in ids:
                k_j = load(k_ref, j, cols)
                for i in below(j):
                    gram[i, j] += dot(load(k_ref, i, cols), k_j, trans_b=True)
        T = c.inverse(gram)

        dT = dict.fromkeys(c.lower(), zero)

        def add_dT(d_ref, src_ref, factor, cols):  # dT += d (factor src)^T, on and below the diagonal
            for j in ids:
                scaled = cast(load(src_ref, j, cols).astype(f32) * factor[j][:, None])
                for i in below(j):
                    dT[i, j] += dot(load(d_ref, i, cols), scaled, trans_b=True)

        for cols in _column_tiles(dk):
            add_dT(dw_ref, k_ref, c.kfac, cols)
        dbeta = [jnp.zeros((SUB,), f32) for _ in ids]
        dG = [jnp.zeros((SUB,), f32) for _ in ids]
        for cols in _column_tiles(dv):  # dVb = T^T du; dv = beta dVb; dbeta += the rows of dVb . v
            add_dT(du_ref, v_ref, c.beta, cols)
            for j in ids:
                dvb = sum(dot(cast(T[i, j]), load(du_ref, i, cols), trans_a=True) for i in below(j))
                dv_ref[b, c.rows(j), h, cols] = (dvb * c.beta[j][:, None]).astype(dv_ref.dtype)
                dbeta[j] += jnp.sum(dvb * load(v_ref, j, cols).astype(f32), axis=1)

        # dA = -T^T dT T^T on A's support, one column block j at a time: Y = (dT T^T)[:, j], then -(T^T Y)
        Dp = {}
        for j in ids:
            Y = {m: sum(dot(dT[m, p], T[j, p], trans_b=True) for p in range(j + 1)) for m in below(j)}
            for i in below(j):
                Dp[i, j] = -sum(dot(T[m, i], Y[m], trans_a=True) for m in below(i)) * c.decay(i, j)

        for cols in _column_tiles(dk):  # dk_j = beta_j own_j + other_j; dbeta, dG from their rows' products with k_j
            for j in ids:
                s_j = jnp.exp(c.G[j]) * c.read[j]  # Kb's row factor over beta
                own = (sum(dot(cast(T[i, j] * s_j[None, :]), load(dw_ref, i, cols), trans_a=True) for i in below(j))
                       + sum(dot(cast(Dp[j, i]), load(k_ref, i, cols)) for i in range(j + 1)))  # s T^T dw + D' K
                other = sum(dot(cast(c.beta[i][:, None] * Dp[i, j]), load(k_ref, i, cols), trans_a=True)
                            for i in below(j))  # (beta D')^T K
                dk_ref[b, c.rows(j), h, cols] = c.beta[j][:, None] * own + other
                k_j = load(k_ref, j, cols).astype(f32)
                own_k, other_k = (jnp.sum(x * k_j, axis=1) for x in (own, other))
                dbeta[j] += own_k
                dG[j] += c.beta[j] * own_k - other_k

        for j in ids:
            dbeta_ref[b, c.rows(j), h] = dbeta[j]
            dg_ref[b, c.rows(j), h] = dG[j]

    gates = jax.ShapeDtypeStruct(g.shape, f32)
    outs = (jax.ShapeDtypeStruct(k.shape, f32), jax.ShapeDtypeStruct(v.shape, v.dtype), gates, gates)
    return launch(kernel, outs, (tp // chunk, b_ * heads), interpret=interpret, name="wy_gradient")(
        k, v, g, beta, reads, dd, dw, du)


__all__ = ["wy_gradient", "wy_representation"]
