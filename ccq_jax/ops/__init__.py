"""Public functional API of ccq-jax: GLA, the gated delta rule, and the CCQ read (fla layouts).

Shapes: q, k, g (GLA) `[B, T, H, K]`; v `[B, T, H, V]`; per-head gates g (gated delta
rule), beta and lam `[B, T, H]`; states `[B, H, K, V]` fp32; CCQ statistics `CCQStats(cov
[B, H, K, K], key_sum [B, H, K], count [B, H])` fp32. Gates are log decays (<= 0). Inputs
may be bf16 or fp32; states, gate cumsums and statistics are always fp32.

`impl` chooses the backend ("recurrent": a token-by-token `lax.scan`, the ground truth;
"chunk": chunkwise-parallel XLA, the default; "scan": `lax.associative_scan`; "pallas": the
`pallas_kernels`, compiled through Triton on a GPU and interpreted elsewhere); all four agree
and are differentiable. `segment_ids [B, T]` marks packed documents: states and
statistics restart wherever the id changes, and `initial_state` / `initial_stats` apply to
the document at position 0 only. `doc_ids` turns segment ids into the monotone document index
the ops use; `l2_normalize` is fla's key normalisation (the gated delta rule's `use_qk_l2norm`);
`ccq_keys` the fp32 (normalised) keys the CCQ statistics are built from.
"""

from ccq_jax.ops import _validate as check
from ccq_jax.ops._dispatch import BACKENDS, check_impl, resolve, takes_chunk_size
from ccq_jax.ops._common import ccq_keys, doc_ids, l2_normalize
from ccq_jax.ops.types import CCQStats

__all__ = ["BACKENDS", "CCQStats", "ccq_gated_delta_rule", "ccq_gla", "ccq_keys", "ccq_query", "doc_ids",
           "gated_delta_rule", "gla", "l2_normalize"]


def _options(op, impl, chunk_size):
    if chunk_size is None:
        return {}
    if not takes_chunk_size(op, impl):
        raise ValueError(f"chunk_size: impl={impl!r} does not work in chunks; leave chunk_size unset")
    return {"chunk_size": check.chunk_size(chunk_size)}


def _docs(segment_ids, b, t):
    return doc_ids(check.segment_ids(segment_ids, b, t), b, t)


def _check_gla(q, k, v, g):
    q, k, v, dims = check.qkv(q, k, v)
    b, t, h, dk, _ = dims
    g = check.per_token("g", g, (b, t, h, dk), "BTHK", hi=0, meaning="log decay: g <= 0")
    return q, k, v, g, dims


def _check_gdn(q, k, v, g, beta):
    q, k, v, dims = check.qkv(q, k, v)
    b, t, h = dims[:3]
    g = check.per_token("g", g, (b, t, h), "BTH", hi=0, meaning="log decay: g <= 0")
    beta = check.per_token("beta", beta, (b, t, h), "BTH", lo=0, hi=2, meaning="delta-rule step size")
    return q, k, v, g, beta, dims


def _check_lam(lam, b, t, h):
    return check.per_token("lam", lam, (b, t, h), "BTH", lo=0, hi=1, meaning="CCQ gate lambda")


def gla(q, k, v, g, *, scale=None, initial_state=None, output_final_state=False, segment_ids=None,
        impl="chunk", chunk_size=None):
    """Gated linear attention: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale * S_t^T q_t.

    q, k, g: [B, T, H, K] (g = log decay <= 0 per key channel); v: [B, T, H, V].
    scale defaults to K**-0.5. initial_state: [B, H, K, V]. Returns (o [B, T, H, V] in v's
    dtype, final_state [B, H, K, V] fp32 or None).
    """
    q, k, v, g, (b, t, h, dk, dv) = _check_gla(q, k, v, g)
    fn = resolve("gla", check_impl(impl))
    o, final = fn(q, k, v, g, scale=check.scale(scale, dk), initial_state=check.state(initial_state, b, h, dk, dv),
                  docs=_docs(segment_ids, b, t), **_options("gla", impl, chunk_size))
    return o, (final if output_final_state else None)


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                     segment_ids=None, impl="chunk", chunk_size=None):
    """Gated delta rule (fla's): S = exp(g_t) S; u_t = beta_t (v_t - S^T k_t); S = S + k_t u_t^T; o_t = scale S^T q_t.

    q, k: [B, T, H, K]; v: [B, T, H, V]; g (log decay <= 0), beta (in [0, 2]): [B, T, H].
    Returns (o [B, T, H, V], final_state [B, H, K, V] fp32 or None).
    """
    q, k, v, g, beta, (b, t, h, dk, dv) = _check_gdn(q, k, v, g, beta)
    fn = resolve("gated_delta_rule", check_impl(impl))
    o, final = fn(q, k, v, g, beta, scale=check.scale(scale, dk),
                  initial_state=check.state(initial_state, b, h, dk, dv), docs=_docs(segment_ids, b, t),
                  **_options("gated_delta_rule", impl, chunk_size))
    return o, (final if output_final_state else None)


def ccq_query(q, k, lam, *, centered=True, normalize_keys=True, initial_stats=None, output_final_stats=False,
              segment_ids=None, impl="chunk", chunk_size=None):
    """The CCQ read: q_clean_t = q_t - lam_t * Sigma_t q_t.

    Sigma_t = C_t / n_t - (m_t / n_t)(m_t / n_t)^T (second term only when `centered`), with
    C_t = sum k^ k^^T, m_t = sum k^ and n_t the count over the tokens of the current document
    up to and including t; k^ = k / ||k|| when `normalize_keys` (then I - lam Sigma has its
    eigenvalues in [1 - lam, 1]). q, k: [B, T, H, K]; lam in [0, 1]: [B, T, H].
    Returns (q_clean [B, T, H, K] in q's dtype, final_stats CCQStats or None).
    """
    q, k, _, (b, t, h, dk, _) = check.qkv(q, k)
    lam = _check_lam(lam, b, t, h)
    fn = resolve("ccq_query", check_impl(impl))
    q_clean, final = fn(q, k, lam, centered=bool(centered), normalize_keys=bool(normalize_keys),
                        initial_stats=check.stats(initial_stats, b, h, dk), docs=_docs(segment_ids, b, t),
                        **_options("ccq_query", impl, chunk_size))
    return q_clean, (final if output_final_stats else None)


def _ccq_backbone(backbone, q, k, lam, backbone_args, *, scale, initial_state, initial_stats, centered,
                  normalize_keys, docs, impl, chunk_size, dims):
    """The CCQ read feeding a backbone: the fused backend function if there is one, else the composition."""
    b, t, h, dk, dv = dims
    common = dict(docs=docs, **_options(backbone, impl, chunk_size))
    ccq = dict(centered=bool(centered), normalize_keys=bool(normalize_keys),
               initial_stats=check.stats(initial_stats, b, h, dk))
    state = dict(scale=check.scale(scale, dk), initial_state=check.state(initial_state, b, h, dk, dv))
    fused = resolve(f"ccq_{backbone}", impl)
    if fused is not None:
        return fused(q, k, *backbone_args, lam, **ccq, **state, **common)
    q_clean, final_stats = resolve("ccq_query", impl)(q, k, lam, **ccq, **common)
    o, final_state = resolve(backbone, impl)(q_clean, k, *backbone_args, **state, **common)
    return o, (final_state, final_stats)


def ccq_gla(q, k, v, g, lam, *, scale=None, initial_state=None, initial_stats=None, output_final_state=False,
            output_final_stats=False, centered=True, normalize_keys=True, segment_ids=None, impl="chunk",
            chunk_size=None):
    """GLA read with the CCQ-cleaned query (write rule unchanged): gla(ccq_query(q, k, lam), k, v, g).

    Returns (o, (final_state or None, final_stats or None)).
    """
    q, k, v, g, dims = _check_gla(q, k, v, g)
    lam = _check_lam(lam, *dims[:3])
    o, (state, stats) = _ccq_backbone(
        "gla", q, k, lam, (v, g), scale=scale, initial_state=initial_state, initial_stats=initial_stats,
        centered=centered, normalize_keys=normalize_keys, docs=_docs(segment_ids, *dims[:2]),
        impl=check_impl(impl), chunk_size=chunk_size, dims=dims)
    return o, (state if output_final_state else None, stats if output_final_stats else None)


def ccq_gated_delta_rule(q, k, v, g, beta, lam, *, scale=None, initial_state=None, initial_stats=None,
                         output_final_state=False, output_final_stats=False, centered=True, normalize_keys=True,
                         segment_ids=None, impl="chunk", chunk_size=None):
    """Gated delta rule read with the CCQ-cleaned query: gated_delta_rule(ccq_query(q, k, lam), k, v, g, beta).

    Returns (o, (final_state or None, final_stats or None)).
    """
    q, k, v, g, beta, dims = _check_gdn(q, k, v, g, beta)
    lam = _check_lam(lam, *dims[:3])
    o, (state, stats) = _ccq_backbone(
        "gated_delta_rule", q, k, lam, (v, g, beta), scale=scale, initial_state=initial_state,
        initial_stats=initial_stats, centered=centered, normalize_keys=normalize_keys,
        docs=_docs(segment_ids, *dims[:2]), impl=check_impl(impl), chunk_size=chunk_size, dims=dims)
    return o, (state if output_final_state else None, stats if output_final_stats else None)
