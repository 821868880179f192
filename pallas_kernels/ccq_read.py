"""The CCQ read's ends around its covariance linear attention: the keys, the cleaned query and the gradients.

`statistics_keys` forms the keys k^ (normalised) and the chunks' key totals in one pass over k. The covariance is a
linear attention with values k^ (`linear_attention`'s states and scores); with the key sum and count of each token's
document inside its chunk,
  m_t = m^_t + reads_t * M_n,   m^_t = sum_{j <= t, in t's chunk and document} k^_j,
  n_t = (the count of those j) + reads_t * N_n,
where M_n, N_n enter chunk n (a scan over the chunks' totals, done by the caller), the read is
  c_t = C_t q_t,   q_clean = q - lam s,   s = c / n - mu (mu . q),   mu = m / n   (mu's term only when centered).
The covariance's passes give c and m^ (its in-chunk scores pass sums the keys on the same pairs; both in q's
dtype, kept for the backward). Row dots over K need whole rows: a program of the ends holds `rows` tokens at the
full key width (fp32 [rows, K] tiles; measured at K = 256: 16 rows, 32 for `key_grad`), one pass. Forming q_clean
inside the covariance's output pass instead (per [C, 64] column tile, m . q from the scores' row sums) measured
slower on the H200: 0.162 ms against 0.078 + 0.067 for the two passes (CCQ-GLA at B = 4, T = 4096). Until the
sixteenth session the ends formed m^ from their chunk's keys themselves (a [rows, C] x [C, K] product per program);
reading it instead: `clean_query` 0.099 -> 0.087 ms, `clean_query_grad` 0.203 -> 0.132 alone (H200, B = 4,
T = 4096, H = 6, bf16). `statistics_keys` forming m^ (a whole chunk per program) took 0.065-0.078 ms against 0.03.

Gradients (g = dq_clean; a = mu . q, b = mu . g, e = g . c, all per token):
  dlam = -(e / n - a b),   dc = -lam g / n,   dq = g + lam mu b,   dm = lam (g a + q b) / n,
  dn = lam (e / n - 2 a b) / n;   without centering a = b = 0 and dm = 0.
dm reaches the keys through the in-chunk sums (a reverse cumsum over the same-document pairs) and
through M_n (the caller transposes the scan); `key_grad` adds those to the covariance's own key
gradients and takes the sum back through the key normalisation.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallas_kernels.tiles import DEFAULT_CONFIG, batch_head, fp32_dot, iota, launch, tile

f32 = jnp.float32


class _Place(NamedTuple):
    """Where a program of grid (Tp / rows, B * H) works: batch row, head, chunk, its `rows` tokens, their
    chunk's tokens and where its tokens start inside that chunk."""

    b: jax.Array
    h: jax.Array
    n: jax.Array
    tokens: pl.Slice
    chunk_tokens: pl.Slice
    offset: jax.Array


def _grid(rows, chunk, q_shape):
    """(tokens a program takes: `rows`, at most a chunk's, so that they lie in one chunk; the grid)."""
    b_, tp, heads = q_shape[:3]
    rows = min(rows, chunk)
    return rows, (tp // rows, b_ * heads)


def _place(heads, rows, chunk):
    r0 = pl.program_id(0) * rows
    n = r0 // chunk
    return _Place(*batch_head(1, heads), n, pl.ds(r0, rows), pl.ds(n * chunk, chunk), r0 - n * chunk)


def _per_chunk_sum(partials, chunk, rows):
    """[B, N, ...] sums of per-program partials [B, Tp / rows, ...] (a chunk holds chunk / rows programs)."""
    b_, programs = partials.shape[:2]
    per = chunk // rows
    return jnp.sum(partials.reshape(b_, programs // per, per, *partials.shape[2:]), axis=2)


def statistics_keys(k, writes, *, chunk, eps, interpret, config=DEFAULT_CONFIG, rows=32):
    """(the keys k^ of the CCQ statistics in k's dtype, k^ = k / sqrt(||k||^2 + eps) formed in fp32 (eps None: k as
    it is); the sum of writes_t k^_t over each chunk, the keys it hands on to the next, [B, N, H, K] fp32, of k^ as
    rounded for the kernels that read it). Programs of `rows` tokens at the full key width (row norms), their
    partial sums added per chunk by XLA."""
    heads, dk = k.shape[2:]
    rows, grid = _grid(rows, chunk, k.shape)

    def kernel(k_ref, w_ref, kh_ref, sum_ref):
        at = _place(heads, rows, chunk)
        b, h, tokens, full = at.b, at.h, at.tokens, pl.ds(0, dk)
        kh = tile(k_ref, b, tokens, h, full)
        if eps is not None:
            kh = kh * jax.lax.rsqrt(jnp.sum(kh * kh, axis=1, keepdims=True) + eps)
        kh = kh.astype(kh_ref.dtype)
        kh_ref[b, tokens, h, full] = kh
        sum_ref[b, pl.ds(pl.program_id(0), 1), h, full] = jnp.sum(w_ref[b, tokens][:, None] * kh.astype(f32), axis=0,
                                                                  keepdims=True)

    outs = (jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct((k.shape[0], grid[0], heads, dk), f32))
    kh, partials = launch(kernel, outs, grid, interpret=interpret, config=config, name="statistics_keys")(k, writes)
    return kh, _per_chunk_sum(partials, chunk, rows)


def _pairs(dd_ref, at, rows, chunk, later):
    """[rows, C] bool: the chunk's token j at or before (later: at or after) the program's token i, one document."""
    i, j = at.offset + iota(rows), iota(chunk)
    order = (j[None, :] >= i[:, None]) if later else (j[None, :] <= i[:, None])
    return order & (dd_ref[at.b, at.tokens][:, None] == dd_ref[at.b, at.chunk_tokens][None, :])


def _running(m_ref, r_ref, dd_ref, ms_ref, mc_ref, at, rows, chunk):
    """(the running key mean [rows, K] fp32 (None unless centered: m_ref None), count [rows], reads [rows]) of the
    program's tokens."""
    before = _pairs(dd_ref, at, rows, chunk, later=False)
    reads = r_ref[at.b, at.tokens]
    count = jnp.sum(before.astype(f32), axis=1) + reads * mc_ref[at.b, pl.ds(at.n, 1), at.h]
    if m_ref is None:
        return None, count, reads
    full = pl.ds(0, m_ref.shape[-1])
    m = tile(m_ref, at.b, at.tokens, at.h, full) + reads[:, None] * ms_ref[at.b, pl.ds(at.n, 1), at.h, full]
    return m / count[:, None], count, reads


def _present(*inputs):
    """The optional inputs given (not None), in order: a kernel takes only those."""
    return tuple(x for x in inputs if x is not None)


def _optional(given, refs):
    """(the next ref, or None where its optional input was not given; the refs after it) inside a kernel."""
    return (refs[0], refs[1:]) if given is not None else (None, refs)


def clean_query(q, running, cov_q, lam, reads, dd, key_sum_in, count_in, *, chunk, interpret, config=DEFAULT_CONFIG,
                rows=16):
    """q_clean [B, Tp, H, K] in q's dtype from q, the keys' running sums inside chunks m^ (in q's dtype, from the
    covariance's `intra_scores`; None: not centered), c = C q, lam [B, Tp, H] and the key sums and counts entering
    each chunk (fp32 [B, N, H, K] and [B, N, H])."""
    heads, dk = q.shape[2:]
    rows, grid = _grid(rows, chunk, q.shape)

    def kernel(q_ref, *refs):
        m_ref, (c_ref, lam_ref, r_ref, dd_ref, ms_ref, mc_ref, out_ref) = _optional(running, refs)
        at = _place(heads, rows, chunk)
        b, h, tokens = at.b, at.h, at.tokens
        mu, count, _ = _running(m_ref, r_ref, dd_ref, ms_ref, mc_ref, at, rows, chunk)
        full = pl.ds(0, dk)
        qf = tile(q_ref, b, tokens, h, full)
        s = tile(c_ref, b, tokens, h, full) / count[:, None]
        if mu is not None:  # centered
            s -= mu * jnp.sum(mu * qf, axis=1, keepdims=True)
        out_ref[b, tokens, h, full] = (qf - lam_ref[b, tokens, h].astype(f32)[:, None] * s).astype(out_ref.dtype)

    return launch(kernel, jax.ShapeDtypeStruct(q.shape, q.dtype), grid, interpret=interpret, config=config,
                  name="clean_query")(
        q, *_present(running), cov_q, lam, reads, dd, key_sum_in, count_in)


def clean_query_grad(dqc, q, running, cov_q, lam, reads, dd, key_sum_in, count_in, *, chunk, interpret,
                     config=DEFAULT_CONFIG, rows=16):
    """The gradients of `clean_query` (see the module's docstring and its arguments) given g = dq_clean:
    (dq, dc and dm in q's dtype (dm None without centering), dlam fp32 [B, Tp, H], and the gradients of the sums
    and counts entering each chunk, fp32 [B, N, H, K] and [B, N, H], of dm before rounding). Half-precision dq
    and dm (like the covariance's own key gradient): H200, CCQ-GLA at B = 4, T = 4096, 0.189 -> 0.150 ms alone."""
    b_, _, heads, dk = q.shape
    rows, grid = _grid(rows, chunk, q.shape)
    centered = running is not None

    def kernel(g_ref, q_ref, *refs):
        m_ref, (c_ref, lam_ref, r_ref, dd_ref, ms_ref, mc_ref, dq_ref, dc_ref, dlam_ref, dmc_ref,
                *centered_refs) = _optional(running, refs)
        at = _place(heads, rows, chunk)
        b, h, tokens = at.b, at.h, at.tokens
        block_id = pl.ds(pl.program_id(0), 1)
        mu, count, reads = _running(m_ref, r_ref, dd_ref, ms_ref, mc_ref, at, rows, chunk)
        full = pl.ds(0, dk)
        g = tile(g_ref, b, tokens, h, full)
        lam_t = lam_ref[b, tokens, h].astype(f32)
        e_n = jnp.sum(g * tile(c_ref, b, tokens, h, full), axis=1) / count
        dc_ref[b, tokens, h, full] = (-(lam_t / count)[:, None] * g).astype(dc_ref.dtype)
        if not centered:
            dlam_ref[b, tokens, h] = -e_n
            dmc_ref[b, block_id, h] = jnp.sum(reads * lam_t * e_n / count, keepdims=True)
            dq_ref[b, tokens, h, full] = g.astype(dq_ref.dtype)
            return
        qf = tile(q_ref, b, tokens, h, full)
        a, b_dot = jnp.sum(mu * qf, axis=1), jnp.sum(mu * g, axis=1)
        dlam_ref[b, tokens, h] = -(e_n - a * b_dot)
        dmc_ref[b, block_id, h] = jnp.sum(reads * lam_t * (e_n - 2 * a * b_dot) / count, keepdims=True)
        dq_ref[b, tokens, h, full] = (g + (lam_t * b_dot)[:, None] * mu).astype(dq_ref.dtype)
        dm = (lam_t / count)[:, None] * (g * a[:, None] + qf * b_dot[:, None])
        dm_ref, dms_ref = centered_refs
        dm_ref[b, tokens, h, full] = dm.astype(dm_ref.dtype)
        dms_ref[b, block_id, h, full] = jnp.sum(reads[:, None] * dm, axis=0, keepdims=True)

    grad = jax.ShapeDtypeStruct(q.shape, q.dtype)
    outs = [grad, grad, jax.ShapeDtypeStruct(lam.shape, f32),
            jax.ShapeDtypeStruct((b_, grid[0], heads), f32)]
    outs += [grad, jax.ShapeDtypeStruct((b_, grid[0], heads, dk), f32)] if centered else []
    dq, dc, dlam, dmc, *centered_outs = launch(kernel, tuple(outs), grid, interpret=interpret, config=config,
                                               name="clean_query_grad")(
        dqc, q, *_present(running), cov_q, lam, reads, dd, key_sum_in, count_in)
    per_chunk = lambda x: _per_chunk_sum(x, chunk, rows)
    if not centered:
        return dq, dc, dlam, None, jnp.zeros(key_sum_in.shape, f32), per_chunk(dmc)
    dm, dms = centered_outs
    return dq, dc, dlam, dm, per_chunk(dms), per_chunk(dmc)


def key_grad(k, dkh, dm, dtotals, writes, dd, *, chunk, eps, interpret, config=DEFAULT_CONFIG, rows=32, dk_rest=None):
    """dk in k's dtype from the covariance's gradient of the keys k^ (`dkh`: as the linear attention's keys
    and values), dm (None: no key-sum term) and the gradients of the chunks' key totals `dtotals` [B, N, H, K]
    (fp32): dk^ = dkh + (the sum of dm over the later tokens of the same document in the chunk) + writes dtotals_n,
    then through k^ = k / sqrt(||k||^2 + eps) (eps None: not normalised); dk_rest (None or like k): the keys'
    gradient from elsewhere (a backbone reading the same keys), added on chip."""
    heads, dk = k.shape[2:]
    rows, grid = _grid(rows, chunk, k.shape)

    def kernel(k_ref, dkh_ref, w_ref, dd_ref, dt_ref, *rest):
        dm_ref, rest = _optional(dm, rest)
        dkr_ref, (out_ref,) = _optional(dk_rest, rest)
        at = _place(heads, rows, chunk)
        b, h, tokens = at.b, at.h, at.tokens
        full = pl.ds(0, dk)
        d = w_ref[b, tokens][:, None] * dt_ref[b, pl.ds(at.n, 1), h, full] + tile(dkh_ref, b, tokens, h, full)
        if dm_ref is not None:
            later = _pairs(dd_ref, at, rows, chunk, later=True).astype(k.dtype)  # 0/1: exact in any dtype
            d += fp32_dot(later, dm_ref[b, at.chunk_tokens, h, full], k.dtype)
        if eps is not None:
            kf = tile(k_ref, b, tokens, h, full)
            r = jax.lax.rsqrt(jnp.sum(kf * kf, axis=1, keepdims=True) + eps)
            d = d * r - kf * (jnp.sum(kf * d, axis=1, keepdims=True) * r ** 3)
        if dkr_ref is not None:
            d += tile(dkr_ref, b, tokens, h, full)
        out_ref[b, tokens, h, full] = d.astype(out_ref.dtype)

    return launch(kernel, jax.ShapeDtypeStruct(k.shape, k.dtype), grid, interpret=interpret, config=config,
                  name="key_grad")(
        k, dkh, writes, dd, dtotals, *_present(dm, dk_rest))
