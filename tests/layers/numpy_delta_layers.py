"""Float64 NumPy forwards of the KDA and Gated DeltaNet-2 layers, written from fla 0.6's `layers/kda.py` and
`layers/gdn2.py` (no code shared with ccq_jax): the gates as fla's `naive_kda_gate` / `naive_kda_lowerbound_gate`,
the recurrences from `tests/ops/numpy_reference.py` (fla's `naive_recurrent_kda` / `naive_recurrent_gdn2`)."""

import numpy as np

from tests.layers.numpy_layers import f64, read, rmsnorm, short_conv, silu, split
from tests.ops import numpy_reference as ref


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _qkv(p, x, head_dim, num_heads, hv, segment_ids):
    """q, k [B, T, HV, K] (l2-normalised, repeated per value head), v [B, T, HV, V]."""
    if "q_conv1d" in p:
        q, k, v = (short_conv(x @ p[f"{n}_proj"]["kernel"], p[f"{n}_conv1d"]["kernel"], segment_ids) for n in "qkv")
    else:
        q, k, v = (silu(x @ p[f"{n}_proj"]["kernel"]) for n in "qkv")
    l2 = lambda a: a / np.sqrt(np.sum(a * a, -1, keepdims=True) + 1e-6)
    q, k = (np.repeat(l2(split(a, head_dim)), hv // num_heads, axis=2) for a in (q, k))
    return q, k, split(v, v.shape[-1] // hv)


def _decay(p, x, head_dim, lower_bound=None):
    f = split((x @ p["f_proj"][0]["kernel"]) @ p["f_proj"][1]["kernel"], head_dim)
    f = f + p["dt_bias"].reshape(f.shape[2], head_dim)
    rate = np.exp(p["A_log"])[:, None]
    return -rate * np.logaddexp(0, f) if lower_bound is None else lower_bound * sigmoid(rate * f)


def _output(p, x, o, eps):
    gate = (x @ p["g_proj"][0]["kernel"]) @ p["g_proj"][1]["kernel"] + p["g_proj"][1]["bias"]
    o = rmsnorm(o, p["o_norm"]["weight"], eps) * sigmoid(split(gate, o.shape[-1]))
    return o.reshape(*o.shape[:2], -1) @ p["o_proj"]["kernel"]


def kda(p, x, *, num_heads, head_dim, ccq, eps, allow_neg_eigval=False, lower_bound=None, segment_ids=None):
    p, x = f64(p), np.asarray(x, np.float64)
    hv = p["A_log"].shape[0]
    q, k, v = _qkv(p, x, head_dim, num_heads, hv, segment_ids)
    g = _decay(p, x, head_dim, lower_bound)
    beta = sigmoid(x @ p["b_proj"]["kernel"]) * (2 if allow_neg_eigval else 1)

    def recurrence(q, k, v, g, beta, scale, segment_ids):
        return ref.generalized_delta_rule(q, k, beta[..., None] * v, g, beta[..., None] * k, scale,
                                          segment_ids=segment_ids)

    return _output(p, x, read(recurrence, q, k, (v, g, beta), p, ccq, segment_ids), eps)


def gdn2(p, x, *, num_heads, head_dim, ccq, eps, allow_neg_eigval=False, segment_ids=None):
    p, x = f64(p), np.asarray(x, np.float64)
    hv = p["o_proj"]["kernel"].shape[0] // p["o_norm"]["weight"].shape[0]
    q, k, v = _qkv(p, x, head_dim, num_heads, hv, segment_ids)
    groups = hv // num_heads
    g = np.repeat(_decay(p, x, head_dim), groups, axis=2)
    b = np.repeat(split(sigmoid(x @ p["b_proj"]["kernel"]), head_dim), groups, axis=2) * (2 if allow_neg_eigval else 1)
    w = split(sigmoid(x @ p["w_proj"]["kernel"]), v.shape[-1])
    return _output(p, x, read(ref.gdn2, q, k, (v, g, b, w), p, ccq, segment_ids), eps)
