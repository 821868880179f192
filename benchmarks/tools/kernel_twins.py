"""XLA twins of the gated delta rule's per-chunk kernels, for tests and benchmarks: what `pallas_kernels.delta_wy`
and `delta_rule.delta_dqkwg` compute, written as plain array algebra on the same padded layout
(docs/design.md, "Gated delta rule")."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ccq_jax.ops.internals import head_factors, pair_decays, pair_products, per_chunk

f32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST


def wy(k, v, G, beta, lay, chunk):
    """w = T (beta exp(G) reads k), u = T (beta v) with T = (I + A)^-1, fp32: the twin of `delta_wy`'s
    `wy_inverse` and `wy_apply` (G: the in-chunk cumsum of the log gates)."""
    b, tp, h = G.shape
    f = lambda x: per_chunk(x, chunk).astype(f32)
    kc, vc, bc, Gc = f(k), f(v), f(beta), per_chunk(G, chunk)  # [B, N, C, H, *]
    reads = per_chunk(lay.reads, chunk)[..., None]
    causal, decay_ij = pair_decays(Gc, lay, chunk)
    strict = causal & ~jnp.eye(chunk, dtype=bool)[:, :, None]
    kk = jnp.where(strict, bc[:, :, :, None] * pair_products(k, k, chunk) * decay_ij, 0)
    eye = jnp.eye(chunk, dtype=f32)
    inverse = jax.lax.linalg.triangular_solve(jnp.moveaxis(kk, 4, 2) + eye, jnp.broadcast_to(eye, kk.shape[:2] + (
        h, chunk, chunk)), left_side=True, lower=True, unit_diagonal=True)  # [B, N, H, C, C]
    apply = lambda rhs: jnp.einsum("bnhij,bnjhd->bnihd", inverse, rhs, precision=HIGHEST).reshape(
        b, tp, h, rhs.shape[-1])
    return apply(kc * (bc * jnp.exp(Gc) * reads)[..., None]), apply(bc[..., None] * vc)


class ChunkAlgebra(NamedTuple):
    """What the gated delta rule computes inside chunks (fp32) besides w and u, given q, k and G."""

    q_read: jax.Array  # [B, Tp, H, K]  q exp(G) reads
    scores: jax.Array  # [B, H, Tp, C]  (q_i . k_j) exp(G_i - G_j), causal, one document
    k_end: jax.Array  # [B, Tp, H, K]  k exp(G_last - G) writes
    decay: jax.Array  # [B, N, H]  exp(G_last) keep


def chunk_algebra(q, k, G, lay, chunk):
    """The rest of the per-chunk algebra: the twin whose autodiff `delta_rule.delta_dqkwg` computes."""
    b, tp, h = G.shape
    _, decay_ij = pair_decays(per_chunk(G, chunk), lay, chunk)
    scores = pair_products(q, k, chunk) * decay_ij
    factors = head_factors(G, lay, chunk)
    return ChunkAlgebra(
        q_read=q.astype(f32) * factors.read[..., None],
        scores=jnp.moveaxis(scores, 4, 1).reshape(b, h, tp, chunk),
        k_end=k.astype(f32) * factors.write[..., None],
        decay=factors.decay,
    )
