"""One token per row through the recurrences, in one kernel each: what a decode step runs per layer.

`state_step` advances the state [B, H, K, V] fp32 of GLA (per-channel gates) or of the gated delta rule (a gate
per head and the delta rule's correction) by one token and reads it:
  S = exp(g) S;  u = v (GLA) or beta (v - S^T k) (delta rule);  S += k u^T;  o = scale S^T q,
a program per V-column tile [K, BV] of a (batch row, head): the state is read once and written once (XLA's fusions
at two rows write the updated state in one kernel and read it back for o in another, after a third formed exp(g)).
`ccq_read_step` advances the CCQ statistics by one key and cleans the query,
  C += k^ k^^T,  m += k^,  n += 1,  q_clean = q - lam (C q / n - mu (mu . q)),  mu = m / n
(the mean term only when centered; k^ = k / sqrt(||k||^2 + eps), eps None: k as it is), a program per row tile
[BR, K] of C (XLA's fusions of the same read C twice, in about five kernels per layer of ccq-gla-1.3b's decode
step: `benchmarks/inference_kernels.py`).

Inputs [B, H, D] (the one token's q, k, v, the gates g [B, H, K] or [B, H], beta and lam [B, H]); K and V powers
of two >= 16 (the caller pads). The products are row sums of fp32 elementwise products (one token: no tensor-core
dot has the rows), so every statistic and state is formed in IEEE fp32.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, batch_head, launch

f32 = jnp.float32


def _head_scalar(ref, b, h):
    """A [B, H] array's value at (b, h), as [1] (a one-element load; Triton takes no scalar loads of a ref)."""
    return ref[b, pl.ds(h, 1)]


def state_step(q, k, v, g, beta, h0, *, scale, out_dtype, interpret, config=DEFAULT_CONFIG, block_v=32):
    """(o [B, H, V] in `out_dtype`, the state after the token [B, H, K, V] fp32).

    g: log gates, [B, H, K] per channel (GLA) or [B, H] per head (the delta rule), fp32; beta: [B, H] for the delta
    rule, None for GLA's plain write.
    """
    b_, heads, dk = q.shape
    dv = v.shape[-1]
    bv = config.block(dv, block_v)
    per_channel, delta = g.ndim == 3, beta is not None

    def kernel(q_ref, k_ref, v_ref, g_ref, *refs):
        beta_ref, h_ref, o_ref, h_out = refs if delta else (None, *refs)
        b, h = batch_head(1, heads)
        full, cols = pl.ds(0, dk), pl.ds(pl.program_id(0) * bv, bv)
        decay = jnp.exp(g_ref[b, h, full])[:, None] if per_channel else jnp.exp(_head_scalar(g_ref, b, h))[:, None]
        state = h_ref[b, h, full, cols] * decay  # [K, BV]
        key = k_ref[b, h, full].astype(f32)[:, None]
        write = v_ref[b, h, cols].astype(f32)
        if delta:
            write = _head_scalar(beta_ref, b, h) * (write - jnp.sum(state * key, axis=0))
        state = state + key * write[None, :]
        h_out[b, h, full, cols] = state
        o_ref[b, h, cols] = (scale * jnp.sum(state * q_ref[b, h, full].astype(f32)[:, None], axis=0)).astype(
            o_ref.dtype)

    inputs = (q, k, v, g.astype(f32), *((beta.astype(f32),) if delta else ()), h0)
    outs = (jax.ShapeDtypeStruct((b_, heads, dv), out_dtype), jax.ShapeDtypeStruct(h0.shape, f32))
    return launch(kernel, outs, (dv // bv, b_ * heads), interpret=interpret, config=config, name="state_step")(*inputs)


def ccq_read_step(q, k, lam, cov, key_sum, count, *, centered, eps, interpret, config=DEFAULT_CONFIG, block_rows=32):
    """(q_clean [B, H, K] in q's dtype, C [B, H, K, K], m [B, H, K], n [B, H]: the statistics after the token, fp32).
    """
    b_, heads, dk = q.shape
    br = config.block(dk, block_rows)

    def kernel(q_ref, k_ref, lam_ref, cov_ref, sum_ref, count_ref, qc_ref, cov_out, sum_out, count_out):
        b, h = batch_head(1, heads)
        full, rows = pl.ds(0, dk), pl.ds(pl.program_id(0) * br, br)
        key, key_rows = k_ref[b, h, full].astype(f32), k_ref[b, h, rows].astype(f32)
        if eps is not None:
            inv_norm = jax.lax.rsqrt(jnp.sum(key * key, axis=0, keepdims=True) + eps)  # [1]
            key, key_rows = key * inv_norm, key_rows * inv_norm
        query = q_ref[b, h, full].astype(f32)
        c = cov_ref[b, h, rows, full] + key_rows[:, None] * key[None, :]  # [BR, K]
        cov_out[b, h, rows, full] = c
        n = _head_scalar(count_ref, b, h) + 1.0  # [1]
        m_rows = sum_ref[b, h, rows] + key_rows
        sum_out[b, h, rows] = m_rows
        sigma_q = jnp.sum(c * query[None, :], axis=1) / n
        if centered:
            mu_dot_q = jnp.sum((sum_ref[b, h, full] + key) * query, axis=0, keepdims=True) / (n * n)
            sigma_q = sigma_q - m_rows * mu_dot_q
        q_rows = q_ref[b, h, rows].astype(f32)
        qc_ref[b, h, rows] = (q_rows - _head_scalar(lam_ref, b, h) * sigma_q).astype(qc_ref.dtype)

        @pl.when(pl.program_id(0) == 0)
        def _():
            count_out[b, pl.ds(h, 1)] = n

    inputs = (q, k, lam.astype(f32), cov, key_sum, count)
    outs = (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(cov.shape, f32),
            jax.ShapeDtypeStruct(key_sum.shape, f32), jax.ShapeDtypeStruct(count.shape, f32))
    return launch(kernel, outs, (dk // br, b_ * heads), interpret=interpret, config=config,
                  name="ccq_read_step")(*inputs)
