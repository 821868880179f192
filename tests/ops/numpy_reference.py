"""Independent float64 NumPy recurrences: the yardstick every JAX implementation is tested against.

Written from the formulas in the issue and docs/design.md with plain loops, sharing no code
with `ccq_jax`, so that an error common to all JAX forms still shows up.
"""

import numpy as np


def _new_document(segment_ids, b, t):
    return segment_ids is not None and t > 0 and segment_ids[b, t] != segment_ids[b, t - 1]


def gla(q, k, v, g, scale, initial_state=None, segment_ids=None):
    q, k, v, g = (np.asarray(x, np.float64) for x in (q, k, v, g))
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = np.zeros((B, T, H, V))
    final = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V)) if initial_state is None else np.array(initial_state[b, h], np.float64)
            for t in range(T):
                if _new_document(segment_ids, b, t):
                    S = np.zeros((K, V))
                S = np.exp(g[b, t, h])[:, None] * S + np.outer(k[b, t, h], v[b, t, h])
                o[b, t, h] = scale * S.T @ q[b, t, h]
            final[b, h] = S
    return o, final


def gated_delta_rule(q, k, v, g, beta, scale, initial_state=None, segment_ids=None):
    q, k, v, g, beta = (np.asarray(x, np.float64) for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = np.zeros((B, T, H, V))
    final = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V)) if initial_state is None else np.array(initial_state[b, h], np.float64)
            for t in range(T):
                if _new_document(segment_ids, b, t):
                    S = np.zeros((K, V))
                S = np.exp(g[b, t, h]) * S
                u = beta[b, t, h] * (v[b, t, h] - S.T @ k[b, t, h])
                S = S + np.outer(k[b, t, h], u)
                o[b, t, h] = scale * S.T @ q[b, t, h]
            final[b, h] = S
    return o, final


def ccq_query(q, k, lam, centered=True, normalize_keys=True, initial_stats=None, segment_ids=None, eps=1e-6):
    """Returns q_clean and (cov, key_sum, count); also the Sigma_t of every token for property tests."""
    q, k, lam = (np.asarray(x, np.float64) for x in (q, k, lam))
    B, T, H, K = q.shape
    q_clean = np.zeros_like(q)
    sigmas = np.zeros((B, T, H, K, K))
    cov_f, sum_f, cnt_f = np.zeros((B, H, K, K)), np.zeros((B, H, K)), np.zeros((B, H))
    for b in range(B):
        for h in range(H):
            if initial_stats is None:
                C, m, n = np.zeros((K, K)), np.zeros(K), 0.0
            else:
                C, m, n = (np.array(s[b, h], np.float64) for s in initial_stats)
            for t in range(T):
                if _new_document(segment_ids, b, t):
                    C, m, n = np.zeros((K, K)), np.zeros(K), 0.0
                kk = k[b, t, h]
                if normalize_keys:
                    kk = kk / np.sqrt(kk @ kk + eps)
                C, m, n = C + np.outer(kk, kk), m + kk, n + 1
                sigma = C / n - (np.outer(m / n, m / n) if centered else 0)
                sigmas[b, t, h] = sigma
                q_clean[b, t, h] = q[b, t, h] - lam[b, t, h] * sigma @ q[b, t, h]
            cov_f[b, h], sum_f[b, h], cnt_f[b, h] = C, m, n
    return q_clean, (cov_f, sum_f, cnt_f), sigmas


def read_policy(q, lam, sigmas, kind, count=1):
    """q_clean of a CCQ read policy from the per-token Sigma_t of `ccq_query` (float64 loops): "neumann" sums
    (-lam Sigma)^i q for i = 0..count; "cg" runs `count` textbook conjugate-gradient steps on (I + lam Sigma) x = q
    from x = q (a zero residual ends the iteration)."""
    q, lam = np.asarray(q, np.float64), np.asarray(lam, np.float64)
    out = np.zeros_like(q)
    for idx in np.ndindex(*q.shape[:3]):
        a = np.eye(q.shape[-1]) + lam[idx] * sigmas[idx]
        if kind == "neumann":
            out[idx] = sum(np.linalg.matrix_power(np.eye(q.shape[-1]) - a, i) @ q[idx] for i in range(count + 1))
            continue
        x = q[idx].copy()
        r = q[idx] - a @ x
        p = r.copy()
        for _ in range(count):
            if not r @ r > 0:
                break
            alpha = (r @ r) / (p @ a @ p)
            x, r_next = x + alpha * p, r - alpha * (a @ p)
            p = r_next + (r_next @ r_next) / (r @ r) * p
            r = r_next
        out[idx] = x
    return out


def generalized_delta_rule(q, k, u, g, a, scale, initial_state=None, segment_ids=None):
    """S = (I - k a^T) Diag(exp g) S + k u^T; o = scale S^T q (u: the written value), with dense K x K matrices."""
    q, k, u, g, a = (np.asarray(x, np.float64) for x in (q, k, u, g, a))
    B, T, H, K = q.shape
    V = u.shape[-1]
    o = np.zeros((B, T, H, V))
    final = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V)) if initial_state is None else np.array(initial_state[b, h], np.float64)
            for t in range(T):
                if _new_document(segment_ids, b, t):
                    S = np.zeros((K, V))
                transition = (np.eye(K) - np.outer(k[b, t, h], a[b, t, h])) @ np.diag(np.exp(g[b, t, h]))
                S = transition @ S + np.outer(k[b, t, h], u[b, t, h])
                o[b, t, h] = scale * S.T @ q[b, t, h]
            final[b, h] = S
    return o, final


def gdn2(q, k, v, g, b, w, scale, initial_state=None, segment_ids=None):
    """fla's GDN-2 recurrence: decay per key channel, read at b * k, write w * v minus that read along k."""
    q, k, v, g, b, w = (np.asarray(x, np.float64) for x in (q, k, v, g, b, w))
    B, T, H, K = q.shape
    o = np.zeros(v.shape)
    final = np.zeros((B, H, K, v.shape[-1]))
    for i in range(B):
        for h in range(H):
            S = np.zeros(final.shape[2:]) if initial_state is None else np.array(initial_state[i, h], np.float64)
            for t in range(T):
                if _new_document(segment_ids, i, t):
                    S = np.zeros_like(S)
                S = np.exp(g[i, t, h])[:, None] * S
                erase = (b[i, t, h] * k[i, t, h]) @ S
                S = S + np.outer(k[i, t, h], w[i, t, h] * v[i, t, h] - erase)
                o[i, t, h] = scale * S.T @ q[i, t, h]
            final[i, h] = S
    return o, final


def qed_erase(q, k, b, lam, project=True, gate_query=True):
    """QED's erase vector a = b * k + lam (I - k k^T) d, d = b * q (or q), per token with explicit K x K matrices."""
    q, k, b, lam = (np.asarray(x, np.float64) for x in (q, k, b, lam))
    a = np.zeros(q.shape)
    for idx in np.ndindex(*q.shape[:3]):
        d = b[idx] * q[idx] if gate_query else q[idx]
        p = np.eye(q.shape[-1]) - np.outer(k[idx], k[idx]) if project else np.eye(q.shape[-1])
        a[idx] = b[idx] * k[idx] + lam[idx] * p @ d
    return a
