"""The per-head gates' factors of the chunked gated delta rule on the kernels' padded layout (fp32; G is the
in-chunk cumsum of the log gates): what the state passes multiply by, and the in-chunk pairwise decays."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..pallas.layout import per_chunk
from ..xla.chunking import masked_exp, mm


class HeadFactors(NamedTuple):
    """The per-head gates' factors of the gated delta rule's state passes, fp32."""

    read: jax.Array  # [B, Tp, H]  exp(G) reads: a query against the state entering its chunk
    write: jax.Array  # [B, Tp, H]  exp(G_last - G) writes: a token's write decayed to its chunk's end
    decay: jax.Array  # [B, N, H]  exp(G_last) keep: how the state entering a chunk survives it


def head_factors(G, lay, chunk):
    """`HeadFactors` of the per-head in-chunk cumsum G [B, Tp, H] under the layout's masks."""
    b, tp, h = G.shape
    Gc = per_chunk(G, chunk)
    reads, writes = (per_chunk(x, chunk)[..., None] for x in (lay.reads, lay.writes))
    G_last = Gc[:, :, -1:]
    flat = lambda x: x.reshape(b, tp, h)
    return HeadFactors(flat(jnp.exp(Gc) * reads), flat(jnp.exp(G_last - Gc) * writes),
                       jnp.exp(G_last[:, :, 0]) * lay.keep[..., None])


def same_doc_causal(dd, chunk):
    """[B, N, C, C] bool: j <= i inside a chunk and in the same document (dd: the padded document index)."""
    d = dd.reshape(dd.shape[0], -1, chunk)
    return jnp.tril(jnp.ones((chunk, chunk), bool)) & (d[..., :, None] == d[..., None, :])


def pair_decays(G, lay, chunk):
    """(causal [B, N, C, C, 1]: j <= i in one document, exp(G_i - G_j) there [B, N, C, C, H]); G in chunks."""
    causal = same_doc_causal(lay.dd, chunk)[..., None]
    return causal, masked_exp(G[:, :, :, None] - G[:, :, None, :], causal)


def pair_products(a, c, chunk):
    """(a_i . c_j) inside each chunk [B, N, C, C, H]: operands in their dtype, exact products, fp32 sums."""
    return mm("bnihk,bnjhk->bnijh", per_chunk(a, chunk), per_chunk(c, chunk), a.dtype)
