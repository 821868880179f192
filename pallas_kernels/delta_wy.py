"""The per-chunk WY/UT form of the gated delta rule in two kernels (fla's `chunk_scaled_dot_kkt` with
`solve_tril`, then `recompute_w_u`), and its gradient in a third (fla's `prepare_wy_repr_bwd`): for each chunk,

    A_ij = beta_i (k_i . k_j) exp(G_i - G_j)   for j < i in one document (0 elsewhere),
    T = (I + A)^-1,   w = T Kb with Kb = beta exp(G) reads k,   u = T Vb with Vb = beta v.

`wy_inverse`: one program per (chunk, batch * head), on 16 x 16 blocks held in registers: A's
blocks come from [16, K] key tiles, each diagonal block of T by forward substitution (row r of
the inverse is e_r - sum_{j<r} A_rj (row j)), the blocks below the diagonal block row by block
row, T_ij = -T_ii sum_{j <= m < i} A_im T_mj (a blocked triangular solve, as stable as one, in
fp32). T is stored fp32 as `[B, Tp, H, C]` (row t of chunk n: row t - nC of its T): the forward
keeps it for the backward, which forms w and u from it again instead of solving again.
`wy_apply`: w and u from T, whole [C, C] tiles against [C, BD] column tiles, T in the inputs'
dtype (bf16 inputs: bf16 operands with fp32 accumulation, as fla's `recompute_w_u`; fp32: IEEE).
(One kernel doing both took as long as the two on the H200: 0.29 ms, 0.33 storing T, against
0.18 + 0.12.) Layouts as in `linear_attention`; gates per head (`G [B, Tp, H]`, the inclusive
in-chunk cumsum).

Gradient: one program per (chunk, batch * head) again, reading T from HBM (as fla's reads A) and
working on whole [C, C] tiles with chunk-sized dots:

    dKb = T^T dw,  dVb = T^T du,  dT = dw Kb^T + du Vb^T,  dA = -T^T dT T^T on A's support,

then through A and Kb, Vb into dk, dv, dbeta and dG. K and V are walked in column tiles of
`_GRAD_TILE`; the [C, C] algebra (T, dT, dA, the gram K K^T) is held fp32, and dA's two products take
operands in the inputs' dtype (bf16 inputs: bf16 operands, fp32 accumulation, as fla's). Measured on the
H200 (bf16, B=4, T=4096, H=6): 0.30 ms alone against 0.42 with those products to fp32 accuracy (bf16 hi + lo
parts), while the whole op's gradients against the float64 recurrence (tests/pallas/test_gpu.py's inputs)
moved from 4.09e-3 to 4.11e-3 relative RMS (dk) and 4.05e-3 to 4.06e-3 (dg), the rest unchanged.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, SUB, batch_head, dot, iota, launch, masked_exp

f32 = jnp.float32

# The gradient's K / V column tile, next to [C, C] fp32 tiles (T, dT, the gram; then D). Triton 3.6 offline
# (sm_90a, bf16, K=256, V=512, C=64, 8 warps): 32 wide spills 112 bytes, 64 wide 80, 128 wide 288.
_GRAD_TILE = 64


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
    """One program's chunk: per 16-row block its G, beta and document."""

    def __init__(self, g_ref, beta_ref, dd_ref, b, h, n, chunk):
        self.blocks = chunk // SUB
        self.rows = lambda i: pl.ds(n * chunk + i * SUB, SUB)
        ids = range(self.blocks)
        self.G = [g_ref[b, self.rows(i), h] for i in ids]
        self.beta = [beta_ref[b, self.rows(i), h].astype(f32) for i in ids]
        self.doc = [dd_ref[b, self.rows(i)] for i in ids]

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


def _column_tiles(width, cap, config):
    """The column slices of a feature axis (width: a power of two >= 16), `cap` wide at most."""
    bd = config.block(width, cap)
    return [pl.ds(ct * bd, bd) for ct in range(width // bd)]


def wy_inverse(k, g, beta, dd, *, chunk, interpret, config=DEFAULT_CONFIG):
    """T = (I + A)^-1 of every chunk, fp32 [B, Tp, H, C] (row t of chunk n holds row t - nC of its T: unit lower
    triangular, zeros above the diagonal); g: the per-head in-chunk cumsum G, fp32; beta [B, Tp, H]."""
    b_, tp, heads, dk = k.shape

    def kernel(k_ref, g_ref, beta_ref, dd_ref, t_ref):
        n, (b, h) = pl.program_id(0), batch_head(1, heads)
        c = _Chunk(g_ref, beta_ref, dd_ref, b, h, n, chunk)
        keys = [k_ref[b, c.rows(i), h, pl.ds(0, dk)] for i in range(c.blocks)]
        T = c.inverse({(i, j): dot(keys[i], keys[j], trans_b=True) for i, j in c.lower()})
        for i in range(c.blocks):
            for j in range(c.blocks):
                t_ref[b, c.rows(i), h, pl.ds(j * SUB, SUB)] = T[i, j] if j <= i else jnp.zeros((SUB, SUB), f32)

    # one warp (as fla's kkt solve): H200, B = 4, T = 4096, H = 6, K = 256: 0.09 ms against 0.10 at two warps and
    # 0.18 at four
    out = jax.ShapeDtypeStruct((b_, tp, heads, chunk), f32)
    return launch(kernel, out, (tp // chunk, b_ * heads), interpret=interpret, config=config, num_warps=1, num_stages=3,
                  name="wy_inverse")(k, g, beta, dd)


def wy_apply(inverse, k, v, g, beta, reads, *, chunk, interpret, config=DEFAULT_CONFIG):
    """(w, u) = (T Kb, T Vb) in k's dtype given every chunk's T (`inverse`, fp32 [B, Tp, H, C]): whole [C, C]
    tiles of T (in the inputs' dtype, as fla's `recompute_w_u`) against [C, BD] column tiles. v=None: w alone
    (the backward, which keeps the forward's v_new instead of forming u again)."""
    b_, tp, heads, dk = k.shape
    dtype = k.dtype
    values = v is not None

    def kernel(t_ref, k_ref, *refs):
        if values:
            v_ref, g_ref, beta_ref, r_ref, w_ref, u_ref = refs
        else:
            g_ref, beta_ref, r_ref, w_ref = refs
        n, (b, h) = pl.program_id(0), batch_head(1, heads)
        rows = pl.ds(n * chunk, chunk)
        T = t_ref[b, rows, h, pl.ds(0, chunk)].astype(dtype)
        beta_ = beta_ref[b, rows, h].astype(f32)
        kfac = beta_ * jnp.exp(g_ref[b, rows, h]) * r_ref[b, rows]

        def apply(out_ref, src_ref, width, factor):
            bd = config.block(width, 64)

            def column_tile(ct, carry):
                cols = pl.ds(ct * bd, bd)
                rhs = (src_ref[b, rows, h, cols].astype(f32) * factor[:, None]).astype(dtype)
                out_ref[b, rows, h, cols] = dot(T, rhs).astype(out_ref.dtype)
                return carry

            jax.lax.fori_loop(0, width // bd, column_tile, 0)

        if values:
            apply(u_ref, v_ref, v.shape[-1], beta_)
        apply(w_ref, k_ref, dk, kfac)

    outs = (jax.ShapeDtypeStruct(k.shape, dtype),) + ((jax.ShapeDtypeStruct(v.shape, dtype),) if values else ())
    # two warps: 0.11 ms against 0.12-0.15 at four (H200, the shapes above, V = 512)
    res = launch(kernel, outs, (tp // chunk, b_ * heads), interpret=interpret, config=config, num_warps=2,
                 name="wy_apply")(
        inverse, k, *((v,) if values else ()), g, beta, reads)
    return tuple(res) if values else (res[0], None)


def wy_gradient(k, v, g, beta, reads, dd, inverse, dw, du, dk_rest, *, chunk, interpret, config=DEFAULT_CONFIG):
    """The gradient of `wy_apply(wy_inverse(...), ...)` given T (`inverse`) and the cotangents dw [B, Tp, H, K]
    and du [B, Tp, H, V] (in k's dtype): (dk + dk_rest in k's dtype, dv in v's dtype, dbeta [B, Tp, H] fp32,
    dG [B, Tp, H] fp32, the gradient w.r.t. the in-chunk cumsum G: the caller turns it into one w.r.t. the log
    gates). dk_rest [B, Tp, H, K] fp32: the keys' gradient from the rest of the op, added on chip.

    Passes over column tiles: V (dT += du Vb^T; dv = beta T^T du and its dbeta share), K (dT += dw Kb^T); then
    on [C, C]: dA and D = dA exp(G_i - G_j) (the gradient of beta_i (k_i . k_j)); a pass over K for the gram
    K K^T, formed after dA so that it, T and dT are never live together (T is loaded where it is needed);
    M = D beta gram (= dA A), which give dbeta's share D . gram and dG's rowsum(M) - colsum(M); a last pass
    over K writes dk = kfac T^T dw + beta (D K) + (beta D)^T K (kfac = beta exp(G) reads) and Kb's shares.
    """
    b_, tp, heads, dk = k.shape
    dv = v.shape[-1]
    dtype = k.dtype

    def kernel(k_ref, v_ref, g_ref, beta_ref, r_ref, dd_ref, t_ref, dw_ref, du_ref, dkr_ref, dk_ref, dv_ref,
               dbeta_ref, dg_ref):
        n, (b, h) = pl.program_id(0), batch_head(1, heads)
        rows = pl.ds(n * chunk, chunk)
        load = lambda ref, cols: ref[b, rows, h, cols]
        cast = lambda x: x.astype(dtype)  # fp32 [C, C] operands of the products with loaded tiles
        tiles = lambda width: _column_tiles(width, _GRAD_TILE, config)
        G, doc = g_ref[b, rows, h], dd_ref[b, rows]
        beta_ = beta_ref[b, rows, h].astype(f32)
        s = jnp.exp(G) * r_ref[b, rows]  # Kb's row factor over beta
        kfac = beta_ * s
        inverse_tile = lambda: t_ref[b, rows, h, pl.ds(0, chunk)]  # T, loaded where it is needed

        dT = jnp.zeros((chunk, chunk), f32)
        dbeta = jnp.zeros((chunk,), f32)
        Tc = cast(inverse_tile())
        for cols in tiles(dv):
            du_t, v_t = load(du_ref, cols), load(v_ref, cols).astype(f32)
            dT += dot(du_t, cast(v_t * beta_[:, None]), trans_b=True)
            dvb = dot(Tc, du_t, trans_a=True)
            dv_ref[b, rows, h, cols] = (dvb * beta_[:, None]).astype(dv_ref.dtype)
            dbeta += jnp.sum(dvb * v_t, axis=1)
        for cols in tiles(dk):
            k_t = load(k_ref, cols)
            dT += dot(load(dw_ref, cols), cast(k_t.astype(f32) * kfac[:, None]), trans_b=True)

        i = iota(chunk)
        support = (i[:, None] > i[None, :]) & (doc[:, None] == doc[None, :])
        # D = dA exp(G_i - G_j) with dA = -T^T dT T^T; the decay vanishes off A's support, which masks dA
        T = inverse_tile()
        dA = -dot(cast(T), cast(dot(cast(dT), cast(T), trans_b=True)), trans_a=True)
        D = dA * masked_exp(G[:, None] - G[None, :], support)
        gram = jnp.zeros((chunk, chunk), f32)
        for cols in tiles(dk):
            k_t = load(k_ref, cols)
            gram += dot(k_t, k_t, trans_b=True)
        M = D * beta_[:, None] * gram
        dbeta += jnp.sum(D * gram, axis=1)
        dG = jnp.sum(M, axis=1) - jnp.sum(M, axis=0)
        Tc, Dc, bDc = cast(inverse_tile()), cast(D), cast(beta_[:, None] * D)
        for cols in tiles(dk):
            k_t = load(k_ref, cols)
            dkb = dot(Tc, load(dw_ref, cols), trans_a=True)
            dk_ref[b, rows, h, cols] = (load(dkr_ref, cols) + kfac[:, None] * dkb + beta_[:, None] * dot(Dc, k_t)
                                        + dot(bDc, k_t, trans_a=True)).astype(dk_ref.dtype)
            dkb_k = jnp.sum(dkb * k_t.astype(f32), axis=1)
            dbeta += s * dkb_k
            dG += kfac * dkb_k

        dbeta_ref[b, rows, h] = dbeta
        dg_ref[b, rows, h] = dG

    gates = jax.ShapeDtypeStruct(g.shape, f32)
    outs = (jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype), gates, gates)
    # half precision, 4 warps and 3 stages: 0.34 ms on the H200 (bf16, B=4, T=4096, H=6, K=256, V=512) against
    # 0.46 at 8 warps, although Triton 3.6 offline spills 1,080 bytes there against 80 (0.41 ms and 1,376 bytes
    # since it also adds dk_rest, which saves two XLA passes over dk; 956 bytes and 0.39 ms in the fwd+bwd profile
    # with `fp32_dot` forming the lo parts late; 372 bytes offline with the gram after dA and T loaded where needed,
    # 1,384 with only the latter, 1,020 with the gram's tiles reduced inside the last pass; 564 with dA's products
    # on bf16 operands, yet 0.30 ms alone against 0.42); fp32 keeps 8 warps
    wide = jnp.dtype(dtype).itemsize >= 4
    return launch(kernel, outs, (tp // chunk, b_ * heads), interpret=interpret, config=config,
                  num_warps=8 if wide else 4,
                  num_stages=2 if wide else 3, name="wy_gradient")(k, v, g, beta, reads, dd, inverse, dw, du, dk_rest)


__all__ = ["wy_apply", "wy_gradient", "wy_inverse"]
