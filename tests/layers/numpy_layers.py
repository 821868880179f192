"""Float64 NumPy forwards of the layers, written from fla's layer definitions (no code shared with ccq_jax).

Each takes the layer's parameters as a nested dict of arrays (`nnx.state(layer).to_pure_dict()`),
the input x [B, T, D] and segment ids, and returns y [B, T, D]. The recurrences come from
`tests/ops/numpy_reference.py`.
"""

import numpy as np

from tests.ops import numpy_reference as ref


def f64(tree):
    if isinstance(tree, dict):
        return {k: f64(v) for k, v in tree.items()}
    return np.asarray(tree, np.float64)


def silu(x):
    return x / (1 + np.exp(-x))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def short_conv(x, kernel, segment_ids, bias=None):
    """Causal depthwise conv (torch Conv1d with W-1 left padding, `bias` [C] or none), zero taps across documents,
    then SiLU."""
    b, t, c = x.shape
    w = kernel.shape[0]
    y = np.zeros_like(x) + (0 if bias is None else bias)
    for bi in range(b):
        start = 0
        for ti in range(t):
            if segment_ids is not None and ti > 0 and segment_ids[bi, ti] != segment_ids[bi, ti - 1]:
                start = ti
            for i in range(w):
                src = ti - (w - 1) + i
                if src >= start:
                    y[bi, ti] += kernel[i] * x[bi, src]
    return silu(y)


def split(x, d):
    return x.reshape(*x.shape[:-1], -1, d)


def read(backbone, q, k, args, p, ccq, segment_ids):
    if ccq is not None and ccq.mode != "off":
        if ccq.mode == "learned":
            lam = 1 / (1 + np.exp(-(np.einsum("bthk,hk->bth", q, p["ccq"]["weight"]) + p["ccq"]["bias"])))
        else:
            lam = np.full(q.shape[:3], ccq.fixed_lambda)
        q, _, _ = ref.ccq_query(q, k, lam, centered=ccq.centered, normalize_keys=ccq.normalize_keys,
                                segment_ids=segment_ids)
    return backbone(q, k, *args, scale=q.shape[-1] ** -0.5, segment_ids=segment_ids)[0]


def gla(p, x, *, num_heads, num_kv_heads, conv, ccq, eps, clamp_min=None, segment_ids=None):
    p, x = f64(p), np.asarray(x, np.float64)
    q, k, v = (x @ p[n]["kernel"] for n in ("q_proj", "k_proj", "v_proj"))
    if conv:
        q, k, v = (short_conv(a, p[f"{n}_conv1d"]["kernel"], segment_ids) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    gk = (x @ p["gk_proj"][0]["kernel"]) @ p["gk_proj"][1]["kernel"] + p["gk_proj"][1]["bias"]
    dk, dv = q.shape[-1] // num_heads, p["o_proj"]["kernel"].shape[0] // num_heads
    groups = num_heads // num_kv_heads
    q = split(q, dk)
    k, gk = (np.repeat(split(a, dk), groups, axis=2) for a in (k, gk))
    v = np.repeat(split(v, dv), groups, axis=2)
    gk = -np.logaddexp(0, -gk) / 16
    if clamp_min is not None:
        gk = np.maximum(gk, clamp_min)
    o = read(ref.gla, q, k, (v, gk), p, ccq, segment_ids)
    if "g_proj" in p:  # output gate on
        o = rmsnorm(o, p["g_norm_swish_gate"]["weight"], eps) * silu(split(x @ p["g_proj"]["kernel"], dv))
    else:
        o = rmsnorm(o, p["g_norm"]["weight"], eps)
    return o.reshape(*o.shape[:2], -1) @ p["o_proj"]["kernel"]


def gated_deltanet(p, x, *, num_heads, head_dim, ccq, eps, allow_neg_eigval=False, segment_ids=None):
    p, x = f64(p), np.asarray(x, np.float64)
    if "q_conv1d" in p:
        q, k, v = (short_conv(x @ p[f"{n}_proj"]["kernel"], p[f"{n}_conv1d"]["kernel"], segment_ids) for n in "qkv")
    else:
        q, k, v = (silu(x @ p[f"{n}_proj"]["kernel"]) for n in "qkv")
    l2 = lambda a: a / np.sqrt(np.sum(a * a, -1, keepdims=True) + 1e-6)
    hv = p["A_log"].shape[0]
    dv = v.shape[-1] // hv
    q, k = (np.repeat(l2(split(a, head_dim)), hv // num_heads, axis=2) for a in (q, k))
    v = split(v, dv)
    a = x @ p["a_proj"]["kernel"] + p["dt_bias"]
    g = -np.exp(p["A_log"]) * np.logaddexp(0, a)
    beta = 1 / (1 + np.exp(-(x @ p["b_proj"]["kernel"])))
    if allow_neg_eigval:
        beta = 2 * beta
    o = read(ref.gated_delta_rule, q, k, (v, g, beta), p, ccq, segment_ids)
    o = rmsnorm(o, p["o_norm"]["weight"], eps)
    if "g_proj" in p:
        o = o * silu(split(x @ p["g_proj"]["kernel"], dv))
    return o.reshape(*o.shape[:2], -1) @ p["o_proj"]["kernel"]


def attention(p, x, *, num_heads, num_kv_heads, theta, segment_ids=None, window=None, rotary_dim=None):
    """Softmax attention within documents, RoPE (half rotation) at positions that restart per document, on the first
    `rotary_dim` channels of each head (None: all; 0: none); a query sees the keys of its document at most
    `window` - 1 tokens back (None: all); projections with their biases when the layer has them; with a `g_proj`,
    the output times sigmoid(x g_proj) before o_proj."""
    p, x = f64(p), np.asarray(x, np.float64)
    b, t, d = x.shape
    hd = d // num_heads
    proj = lambda n: x @ p[n]["kernel"] + p[n].get("bias", 0.0)
    q = split(proj("q_proj"), hd)
    k, v = (np.repeat(split(proj(n), hd), num_heads // num_kv_heads, axis=2) for n in ("k_proj", "v_proj"))
    seg = np.zeros((b, t), int) if segment_ids is None else np.asarray(segment_ids)
    pos = np.zeros((b, t))
    for bi in range(b):
        for ti in range(1, t):
            pos[bi, ti] = 0 if seg[bi, ti] != seg[bi, ti - 1] else pos[bi, ti - 1] + 1
    r = (hd if rotary_dim is None else rotary_dim) // 2
    freq = theta ** (-np.arange(r) / max(r, 1))
    ang = pos[..., None, None] * freq
    rot = lambda a: np.concatenate([a[..., :r] * np.cos(ang) - a[..., r:2 * r] * np.sin(ang),
                                    a[..., r:2 * r] * np.cos(ang) + a[..., :r] * np.sin(ang), a[..., 2 * r:]], -1)
    q, k = rot(q), rot(k)
    o = np.zeros_like(q)
    for bi in range(b):
        for ti in range(t):
            js = [j for j in range(ti + 1) if all(seg[bi, j] == seg[bi, m] for m in range(j, ti + 1))
                  and (window is None or ti - j < window)]
            s = np.einsum("hd,jhd->hj", q[bi, ti], k[bi, js]) / np.sqrt(hd)
            w = np.exp(s - s.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            o[bi, ti] = np.einsum("hj,jhd->hd", w, v[bi, js])
    o = o.reshape(b, t, d)
    if "g_proj" in p:
        o = o / (1 + np.exp(-(x @ p["g_proj"]["kernel"])))
    return o @ p["o_proj"]["kernel"]
