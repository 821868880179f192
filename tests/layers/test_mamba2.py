"""The Mamba2 layer (SSD on `ops.gla`) against a float64 NumPy token-by-token Mamba2 recurrence written from fla's
layer (h = exp(dt A) h + dt B x^T, y = C^T h + D x), with groups, documents, CCQ and decoding through the cache."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.layers import CCQConfig, KernelPolicy
from ccq_jax.layers.mamba2 import Mamba2, mamba2_dims
from tests.layers import numpy_layers as nl
from tests.ops import numpy_reference as ref
from tests.builders import call, D, layer_inputs as inputs, layer_params as params, randomize, rel_rms, SEGMENTS

TOL = 2e-5  # fp32 layer vs float64 NumPy, as tests/layers/test_layers.py
P, N = 8, 6  # head_dim, state_size: D = 32, expand 2 -> 8 heads


def softplus(x):
    return np.logaddexp(0, x)


def mamba2_numpy(p, x, *, n_groups, eps=1e-5, norm_before_gate=False, rmsnorm=True, dt_limit=(0.0, np.inf), ccq=None,
                 segment_ids=None):
    """fla's Mamba2 forward in float64 NumPy, the SSM token by token; head h reads group h // (H / G)."""
    p = jax_tree_f64(p)
    x = np.asarray(x, np.float64)
    b_, t_, _ = x.shape
    inter = p["out_proj"]["kernel"].shape[0]
    h_ = inter // P
    zxbcdt = x @ p["in_proj"]["kernel"] + p["in_proj"].get("bias", 0)
    z, xbc, dt = np.split(zxbcdt, [inter, 2 * inter + 2 * n_groups * N], -1)
    xbc = nl.short_conv(xbc, p["conv1d"]["kernel"], segment_ids, p["conv1d"].get("bias"))
    xs, bm, cm = np.split(xbc, [inter, inter + n_groups * N], -1)
    xs = xs.reshape(b_, t_, h_, P)
    bm, cm = (np.repeat(m.reshape(b_, t_, n_groups, N), h_ // n_groups, axis=2) for m in (bm, cm))
    dt = np.clip(softplus(dt + p["dt_bias"]), *dt_limit)
    a = -np.exp(p["A_log"])
    d = p["D"].reshape(-1, P) if p["D"].shape[0] == inter else p["D"][:, None]
    if ccq is not None and ccq.mode != "off":
        if ccq.mode == "learned":
            lam = 1 / (1 + np.exp(-(np.einsum("bthk,hk->bth", cm, p["ccq"]["weight"]) + p["ccq"]["bias"])))
        else:
            lam = np.full(cm.shape[:3], ccq.fixed_lambda)
        cm = ref.ccq_query(cm, bm, lam, centered=ccq.centered, normalize_keys=ccq.normalize_keys,
                           segment_ids=segment_ids)[0]
    y = np.zeros_like(xs)
    for bi in range(b_):
        h = np.zeros((h_, N, P))
        for ti in range(t_):
            if segment_ids is not None and ti > 0 and segment_ids[bi, ti] != segment_ids[bi, ti - 1]:
                h = np.zeros((h_, N, P))
            for hi in range(h_):
                dti = dt[bi, ti, hi]
                h[hi] = np.exp(dti * a[hi]) * h[hi] + dti * np.outer(bm[bi, ti, hi], xs[bi, ti, hi])
                y[bi, ti, hi] = cm[bi, ti, hi] @ h[hi] + d[hi] * xs[bi, ti, hi]
    y = y.reshape(b_, t_, inter)
    if not rmsnorm:
        y = y * nl.silu(z)
    else:
        gate = nl.silu(z)
        y = y if norm_before_gate else y * gate
        g = y.reshape(b_, t_, n_groups, -1)
        y = (g / np.sqrt(np.mean(g * g, -1, keepdims=True) + eps)).reshape(b_, t_, inter) * p["norm"]["weight"]
        y = y * gate if norm_before_gate else y
    return y @ p["out_proj"]["kernel"] + p["out_proj"].get("bias", 0)


def jax_tree_f64(tree):
    return {k: jax_tree_f64(v) for k, v in tree.items()} if isinstance(tree, dict) else np.asarray(tree, np.float64)


CCQ = {"none": None, "learned": CCQConfig(), "fixed": CCQConfig(mode="fixed", fixed_lambda=0.7, centered=False)}
# (CCQ, groups, norm_before_gate, rmsnorm, D per channel and biases, dt_limit, documents): every option once
CASES = [("none", 1, False, True, False, (0.0, np.inf), True), ("learned", 2, False, True, True, (0.0, np.inf), True),
         ("fixed", 4, True, True, False, (0.1, 0.5), False), ("none", 2, False, False, True, (0.0, np.inf), True)]


def layer(ccq="none", groups=1, nbg=False, rms=True, hdim=False, limit=(0.0, np.inf), kernel=None):
    return randomize(Mamba2(D, head_dim=P, state_size=N, n_groups=groups, norm_before_gate=nbg, rmsnorm=rms,
                            D_has_hdim=hdim, use_bias=hdim, dt_limit=limit, ccq=CCQ[ccq],
                            kernel=kernel or KernelPolicy(impl="recurrent"), rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("ccq,groups,nbg,rms,hdim,limit,segments", CASES)
def test_mamba2_layer_matches_the_numpy_recurrence(ccq, groups, nbg, rms, hdim, limit, segments):
    m = layer(ccq, groups, nbg, rms, hdim, limit)
    seg = SEGMENTS if segments else None
    y, cache = call(m, inputs(), seg)
    expected = mamba2_numpy(params(m), inputs(), n_groups=groups, norm_before_gate=nbg, rmsnorm=rms,
                            dt_limit=limit, ccq=CCQ[ccq], segment_ids=seg)
    assert cache is None
    assert rel_rms(y, expected) < TOL


@pytest.mark.parametrize("ccq", ["none", "learned"])
def test_chunked_form_equals_the_recurrent_form(ccq):
    m = layer(ccq, 2, kernel=KernelPolicy(chunk_size=4))
    recurrent = layer(ccq, 2)
    assert rel_rms(call(m, inputs(), SEGMENTS)[0], call(recurrent, inputs(), SEGMENTS)[0]) < 1e-5


@pytest.mark.parametrize("ccq", ["none", "learned"])
def test_prefill_then_decode_equals_one_call(ccq):
    """Pieces of 9, 1, 1 and 8 tokens through the cache (conv tail, SSM state, CCQ statistics) = one pass."""
    m = layer(ccq, 2, kernel=KernelPolicy(chunk_size=4))
    x = inputs(3)
    full, _ = call(m, x, SEGMENTS)
    cache = m.init_cache(x.shape[0])
    outs, start = [], 0
    for size in (9, 1, 1, 8):
        y, cache = call(m, x[:, start:start + size], SEGMENTS[:, start:start + size], cache)
        outs.append(y)
        start += size
    assert cache.state.shape == (2, 8, N, P) and cache.conv[0].shape == (2, 3, 2 * D + 2 * 2 * N)
    assert rel_rms(jnp.concatenate(outs, axis=1), full) < 1e-5


def test_parameters_have_fla_names_and_shapes():
    m = Mamba2(D, head_dim=P, state_size=N, n_groups=2, rngs=nnx.Rngs(0))
    shapes = {k: (v.shape if not isinstance(v, dict) else {kk: vv.shape for kk, vv in v.items()})
              for k, v in params(m).items()}
    conv = 2 * D + 2 * 2 * N
    assert shapes == {"in_proj": {"kernel": (D, 2 * D + conv + 8)}, "conv1d": {"kernel": (4, conv), "bias": (conv,)},
                      "dt_bias": (8,), "A_log": (8,), "D": (8,), "norm": {"weight": (2 * D,)},
                      "out_proj": {"kernel": (2 * D, D)}}
    assert np.all(-np.exp(params(m)["A_log"]) <= -1) and np.all(params(m)["D"] == 1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(head_dim=12), "head_dim: must divide"), (dict(n_groups=3), "n_groups: must divide"),
    (dict(num_heads=4), "num_heads: must equal")])
def test_bad_sizes_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mamba2_dims(D, **{"head_dim": P, **kwargs})
