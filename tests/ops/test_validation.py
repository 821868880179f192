"""Bad input raises ValueError naming the argument and what was expected."""

import jax
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import make_inputs


@pytest.fixture(scope="module")
def x():
    return make_inputs(30, "weak_decay", t=8)


def _call(op, positional, kw):
    """op(*positional, **rest): `kw` may replace a positional input by its name."""
    values = [kw.pop(name, value) for name, value in positional]
    return op(*values, **kw)


def _gla(x, **kw):
    return _call(ops.gla, [(n, x[n]) for n in ("q", "k", "v", "g")], kw)


def _gdn(x, **kw):
    return _call(ops.gated_delta_rule, [("q", x["q"]), ("k", x["k"]), ("v", x["v"]), ("g", x["g_head"]), ("beta", x["beta"])], kw)


@pytest.mark.parametrize("kw,match", [
    ({"k": np.zeros((2, 8, 2, 8), np.float32)}, r"k: expected shape \[B=2, T=8, H=2, K=16\], got \(2, 8, 2, 8\)"),
    ({"v": np.zeros((2, 7, 2, 12), np.float32)}, r"v: expected shape \[B=2, T=8, H=2, V\], got \(2, 7, 2, 12\)"),
    ({"q": np.zeros((2, 8, 16), np.float32)}, r"q: expected shape \[B, T, H, K\], got \(2, 8, 16\)"),
    ({"q": np.zeros((2, 0, 2, 16), np.float32)}, r"q: expected at least one token"),
    ({"g": np.zeros((2, 8, 2), np.float32)}, r"g: expected shape \[B=2, T=8, H=2, K=16\]"),
    ({"g": np.full((2, 8, 2, 16), 0.1, np.float32)}, r"g: expected values in \[-inf, 0\] \(log decay: g <= 0\); found 0.1"),
    ({"g": np.full((2, 8, 2, 16), np.nan, np.float32)}, r"g: expected values in .*found nan"),
    ({"q": np.zeros((2, 8, 2, 16), np.int32)}, r"q: expected a floating dtype"),
    ({"initial_state": np.zeros((2, 2, 12, 16), np.float32)}, r"initial_state: expected shape \[B=2, H=2, K=16, V=12\]"),
    ({"scale": -1.0}, r"scale: expected a positive finite number, got -1.0"),
    ({"impl": "flash"}, r"impl: expected one of \['chunk', 'pallas', 'pallas_mosaic_gpu', 'pallas_mosaic_tpu', "
                          r"'pallas_triton', 'recurrent', 'scan'\], got 'flash'"),
    ({"segment_ids": np.zeros((2, 8), np.float32)}, r"segment_ids: expected an integer dtype"),
    ({"segment_ids": np.zeros((2, 9), np.int32)}, r"segment_ids: expected shape \[B=2, T=8\], got \(2, 9\)"),
    ({"chunk_size": 0}, r"chunk_size: expected a positive integer, got 0"),
    ({"impl": "recurrent", "chunk_size": 16}, r"chunk_size: impl='recurrent' does not work in chunks"),
])
def test_gla_errors(x, kw, match):
    with pytest.raises(ValueError, match=match):
        _gla(x, **kw)


@pytest.mark.parametrize("kw,match", [
    ({"g": np.zeros((2, 8, 2, 16), np.float32)}, r"g: expected shape \[B=2, T=8, H=2\]"),
    ({"beta": np.full((2, 8, 2), 2.5, np.float32)}, r"beta: expected values in \[0, 2\] \(delta-rule step size\); found 2.5"),
    ({"beta": np.full((2, 8, 2), -0.1, np.float32)}, r"beta: expected values in \[0, 2\]"),
    ({"beta": np.zeros((2, 8, 3), np.float32)}, r"beta: expected shape \[B=2, T=8, H=2\], got \(2, 8, 3\)"),
])
def test_gated_delta_rule_errors(x, kw, match):
    with pytest.raises(ValueError, match=match):
        _gdn(x, **kw)


def test_ccq_errors(x):
    with pytest.raises(ValueError, match=r"lam: expected values in \[0, 1\] \(CCQ gate lambda\); found 1.5"):
        ops.ccq_query(x["q"], x["k"], np.full((2, 8, 2), 1.5, np.float32))
    with pytest.raises(ValueError, match=r"lam: expected shape \[B=2, T=8, H=2\]"):
        ops.ccq_gla(x["q"], x["k"], x["v"], x["g"], np.zeros((2, 8), np.float32))
    with pytest.raises(ValueError, match=r"initial_stats.cov: expected shape \[B=2, H=2, K=16, K=16\]"):
        ops.ccq_query(x["q"], x["k"], x["lam"], initial_stats=ops.CCQStats(np.zeros((2, 2, 16)), np.zeros((2, 2, 16)), np.zeros((2, 2))))
    with pytest.raises(ValueError, match=r"initial_stats.count: expected values in \[0, inf\]"):
        ops.ccq_query(x["q"], x["k"], x["lam"], initial_stats=ops.CCQStats(np.zeros((2, 2, 16, 16)), np.zeros((2, 2, 16)), -np.ones((2, 2))))
    with pytest.raises(ValueError, match=r"initial_stats: expected a CCQStats"):
        ops.ccq_query(x["q"], x["k"], x["lam"], initial_stats=np.zeros((2, 2, 16, 16)))
    with pytest.raises(ValueError, match=r"beta: expected values in \[0, 2\]"):
        ops.ccq_gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"] + 3, x["lam"])


def test_range_checks_are_skipped_under_jit_but_shapes_are_not(x):
    bad_g = np.full((2, 8, 2, 16), 0.1, np.float32)
    jax.jit(lambda g: ops.gla(x["q"], x["k"], x["v"], g)[0])(bad_g)  # no value to check while tracing
    with pytest.raises(ValueError, match=r"g: expected shape"):
        jax.jit(lambda g: ops.gla(x["q"], x["k"], x["v"], g)[0])(bad_g[..., :3])


def test_pallas_refuses_a_platform_without_its_kernels(monkeypatch):
    """On a platform with no kernels (here Apple's METAL plugin), impl="pallas" must not fall back to interpreted
    kernels in silence."""
    monkeypatch.setattr(jax, "default_backend", lambda: "METAL")
    q = np.full((1, 11, 1, 16), 0.1, np.float32)  # a shape no other test traces: the jit cache must not answer
    gate = np.full((1, 11, 1), -0.1, np.float32)
    with pytest.raises(ValueError, match=r"impl: 'pallas' has no kernels for platform 'METAL' yet .*impl='chunk'"):
        ops.gated_delta_rule(q, q, q, gate, -gate, impl="pallas")


def test_an_op_without_the_named_backend_says_which_it_has():
    q = np.full((1, 8, 1, 16), 0.1, np.float32)
    with pytest.raises(ValueError, match=r"impl: gla has no 'pallas_mosaic_gpu' backend; it has \['chunk', "
                                         r"'pallas_mosaic_tpu', 'pallas_triton', 'recurrent', 'scan'\] \(and "
                                         r"'pallas'\)"):
        ops.gla(q, q, q, -q, impl="pallas_mosaic_gpu")


def test_a_list_is_refused_by_name_eagerly_and_under_jit():
    x = make_inputs(40, "weak_decay", t=8)
    q = np.asarray(x["q"]).tolist()
    with pytest.raises(ValueError, match=r"q: expected an array \(jax.Array or numpy.ndarray\), got list"):
        ops.gla(q, x["k"], x["v"], x["g"])
    with pytest.raises(ValueError, match=r"q: expected an array"):
        jax.jit(lambda q: ops.gla(q, x["k"], x["v"], x["g"]))(q)


@pytest.mark.parametrize("name,where,value", [("q", (0, 3, 1, 2), np.nan), ("k", (1, 0, 0, 0), -np.inf),
                                              ("v", (0, 5, 1, 3), np.inf)])
@pytest.mark.parametrize("op", [_gla, _gdn])
def test_a_non_finite_input_is_refused_by_name_and_place(x, op, name, where, value):
    """A NaN or inf in one token reached other tokens' outputs in the chunked forms (a masked product's 0 * inf):
    the ops refuse it, naming the argument, the value and its index."""
    bad = np.array(x[name])
    bad[where] = value
    with pytest.raises(ValueError, match=rf"{name}: expected finite values \(no NaN or inf\); found {value} at index "
                                         rf"\[{', '.join(map(str, where))}\]"):
        op(x, **{name: bad})
    with pytest.raises(ValueError, match=rf"k: expected finite values"):
        ops.ccq_query(x["q"], np.where(np.arange(16) == 3, np.inf, x["k"]), x["lam"])
