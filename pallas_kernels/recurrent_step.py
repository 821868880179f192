"""One token per row through the recurrences, in one kernel each: what a decode step runs per layer.

`state_step` advances the state [B, H, K, V] fp32 of GLA (per-channel gates), of the gated delta rule (a gate
per head and the delta rule's correction) or of the generalized delta rule (per-channel gates, an erase vector a)
by one token and reads it:
  S = exp(g) S;  u = v (GLA), beta (v - S^T k) (delta rule) or v - S^T a (generalized);  S += k u^T;  o = scale S^T q,
a program per V-column tile [K, BV] of a (batch row, head): the state is read once and written once (XLA's fusions
at two rows write the updated state in one kernel and read it back for o in another, after a third formed exp(g)).
`ccq_read_step` advances the CCQ statistics by one key and cleans the query,
  C += k^ k^^T,  m += k^,  n += 1,  q_clean = q - lam (C q / n - mu (mu . q)),  mu = m / n
(the mean term only when centered; k^ = k / sqrt(||k||^2 + eps), eps None: k as it is), a program per row tile
[BR, K] of C (XLA's fusions of the same read C twice, in about five kernels per layer of ccq-gla-1.3b's decode
step: `benchmarks/inference_kernels.py`).

The token comes packed, so that XLA forms each input in one fusion (it cannot fuse a custom call's producers into
the call, and the slices of a fused q/k/v projection, the q/k norms or the gates would each be a kernel):
`tokens` [B, H K + H K + H V] holds q, k and v, each head's entries contiguous (q of head h at h K, k at H K + h K,
v at 2 H K + h V; the generalized rule's a after them, at 2 H K + H V + h K), and `gates` [B, G] fp32 the log gates g (per channel at h K, or per head at h), beta and lam
(each per head, at offsets the caller names). K and V are powers of two >= 16 (the caller pads). The products are
row sums of fp32 elementwise products (one token: no tensor-core dot has the rows), so every statistic and state
is formed in IEEE fp32.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, batch_head, launch

f32 = jnp.float32


class GateLayout(NamedTuple):
    """Where a head's gates sit in `gates`: g per channel (h K) or per head (h); beta and lam at `*_at + h` (None:
    absent: GLA's plain write, no CCQ read); erase: whether `tokens` carries the erase vector a after v."""

    per_channel: bool
    beta_at: int | None = None
    lam_at: int | None = None
    erase: bool = False


def _head_scalar(ref, b, at):
    """ref[b, at] as [1] (a one-element load; Triton takes no scalar loads of a ref)."""
    return ref[b, pl.ds(at, 1)]


def state_step(tokens, gates, h0, q=None, *, layout: GateLayout, scale, out_dtype, interpret, config=DEFAULT_CONFIG,
               block_v=32):
    """(o [B, H, V] in `out_dtype`, the state after the token [B, H, K, V] fp32) from the packed token and gates
    (the module docstring) and the state h0 [B, H, K, V] fp32; q [B, H, K]: read with this query instead of the
    packed one (the CCQ-cleaned query).

    The new state is written over h0's buffer (aliased): inside a decode loop it stays in the loop's carry, where a
    fresh buffer was copied back every token (99 us per token for gla-1.3b on an H100); a caller that keeps h0
    gets a copy made by XLA first."""
    b_, heads, dk, dv = h0.shape
    bv = config.block(dv, block_v)
    delta = layout.beta_at is not None

    def kernel(tokens_ref, gates_ref, h_ref, *refs):
        q_ref, o_ref, h_out = refs if q is not None else (None, *refs)
        b, h = batch_head(1, heads)
        full, cols = pl.ds(0, dk), pl.ds(pl.program_id(0) * bv, bv)
        g = gates_ref[b, pl.ds(h * dk, dk)] if layout.per_channel else _head_scalar(gates_ref, b, h)
        state = h_ref[b, h, full, cols] * jnp.exp(g)[:, None]  # [K, BV]
        key = tokens_ref[b, pl.ds((heads + h) * dk, dk)].astype(f32)[:, None]
        write = tokens_ref[b, pl.ds(2 * heads * dk + h * dv + pl.program_id(0) * bv, bv)].astype(f32)
        if layout.erase:
            erase = tokens_ref[b, pl.ds(2 * heads * dk + heads * dv + h * dk, dk)].astype(f32)[:, None]
            write = write - jnp.sum(state * erase, axis=0)
        elif delta:
            write = _head_scalar(gates_ref, b, layout.beta_at + h) * (write - jnp.sum(state * key, axis=0))
        state = state + key * write[None, :]
        h_out[b, h, full, cols] = state
        query = q_ref[b, h, full] if q is not None else tokens_ref[b, pl.ds(h * dk, dk)]
        o_ref[b, h, cols] = (scale * jnp.sum(state * query.astype(f32)[:, None], axis=0)).astype(o_ref.dtype)

    inputs = (tokens, gates, h0) + ((q,) if q is not None else ())
    outs = (jax.ShapeDtypeStruct((b_, heads, dv), out_dtype), jax.ShapeDtypeStruct(h0.shape, f32))
    return launch(kernel, outs, (dv // bv, b_ * heads), interpret=interpret, config=config, aliases={2: 1},
                  name="state_step")(*inputs)


def ccq_read_step(tokens, gates, cov, key_sum, count, *, layout: GateLayout, centered, eps, out_dtype, interpret,
                  config=DEFAULT_CONFIG, block_rows=32):
    """(q_clean [B, H, K] in `out_dtype`, C [B, H, K, K], m [B, H, K], n [B, H]: the statistics after the token,
    fp32) from the packed token (q and k; v may follow), the gates (lam at `layout.lam_at`) and the statistics
    before it. C is written over cov's buffer (each program reads and writes only its rows); m and n are new
    arrays, since every program reads all of m (for mu . q) and n."""
    b_, heads, dk = key_sum.shape
    br = config.block(dk, block_rows)

    def kernel(tokens_ref, gates_ref, cov_ref, sum_ref, count_ref, qc_ref, cov_out, sum_out, count_out):
        b, h = batch_head(1, heads)
        r0 = pl.program_id(0) * br
        full, rows = pl.ds(0, dk), pl.ds(r0, br)
        key_at = (heads + h) * dk
        key = tokens_ref[b, pl.ds(key_at, dk)].astype(f32)
        key_rows = tokens_ref[b, pl.ds(key_at + r0, br)].astype(f32)
        if eps is not None:
            inv_norm = jax.lax.rsqrt(jnp.sum(key * key, axis=0, keepdims=True) + eps)  # [1]
            key, key_rows = key * inv_norm, key_rows * inv_norm
        query = tokens_ref[b, pl.ds(h * dk, dk)].astype(f32)
        c = cov_ref[b, h, rows, full] + key_rows[:, None] * key[None, :]  # [BR, K]
        cov_out[b, h, rows, full] = c
        n = _head_scalar(count_ref, b, h) + 1.0  # [1]
        m_rows = sum_ref[b, h, rows] + key_rows
        sum_out[b, h, rows] = m_rows
        sigma_q = jnp.sum(c * query[None, :], axis=1) / n
        if centered:
            mu_dot_q = jnp.sum((sum_ref[b, h, full] + key) * query, axis=0, keepdims=True) / (n * n)
            sigma_q = sigma_q - m_rows * mu_dot_q
        q_rows = tokens_ref[b, pl.ds(h * dk + r0, br)].astype(f32)
        lam = _head_scalar(gates_ref, b, layout.lam_at + h)
        qc_ref[b, h, rows] = (q_rows - lam * sigma_q).astype(qc_ref.dtype)

        @pl.when(pl.program_id(0) == 0)
        def _():
            count_out[b, pl.ds(h, 1)] = n

    outs = (jax.ShapeDtypeStruct(key_sum.shape, out_dtype), jax.ShapeDtypeStruct(cov.shape, f32),
            jax.ShapeDtypeStruct(key_sum.shape, f32), jax.ShapeDtypeStruct(count.shape, f32))
    return launch(kernel, outs, (dk // br, b_ * heads), interpret=interpret, config=config, aliases={2: 1},
                  name="ccq_read_step")(tokens, gates, cov, key_sum, count)
