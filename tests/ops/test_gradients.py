"""Gradients of every impl (fp32) against the recurrent form run in float64, all inputs included."""

import jax
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import float64_ground_truth, make_inputs, op_gradients, rel_rms

FP32_TOL = 1e-5
IMPLS = [("recurrent", None), ("scan", None), ("chunk", None), ("chunk", 16), ("chunk", 24)]


def _compare(op, pos, kw, x):
    want = float64_ground_truth(op, pos, kw, x)
    leaves_want = jax.tree_util.tree_leaves_with_path(want)
    for impl, chunk in IMPLS:
        got = jax.tree.leaves(op_gradients(op, pos, kw, x, impl, chunk))
        for (path, w), g in zip(leaves_want, got):
            assert np.all(np.isfinite(g)), f"{impl}/{chunk}: non-finite gradient at {jax.tree_util.keystr(path)}"
            err = rel_rms(g, w)
            assert err < FP32_TOL, f"{impl}/{chunk}: d{jax.tree_util.keystr(path)} relative RMS {err:.2e}"


@pytest.mark.parametrize("case", ["weak_decay", "strong_decay", "zeroed_gates", "segments"])
def test_gla_grads(case):
    x = make_inputs(10, case, t=40)
    pos = [x["q"], x["k"], x["v"], x["g"]]
    _compare(ops.gla, pos, {"initial_state": x["initial_state"]}, x)


@pytest.mark.parametrize("case", ["weak_decay", "strong_decay", "zeroed_gates", "segments"])
def test_gated_delta_rule_grads(case):
    x = make_inputs(11, case, t=40, k_norm=True)
    pos = [x["q"], x["k"], x["v"], x["g_head"], x["beta"]]
    _compare(ops.gated_delta_rule, pos, {"initial_state": x["initial_state"]}, x)


@pytest.mark.parametrize("case", ["weak_decay", "segments"])
def test_ccq_query_grads(case):
    x = make_inputs(12, case, t=40)
    pos = [x["q"], x["k"], x["lam"]]
    _compare(ops.ccq_query, pos, {"initial_stats": ops.CCQStats(*x["initial_stats"])}, x)


@pytest.mark.parametrize("op,gate", [(ops.ccq_gla, "g"), (ops.ccq_gated_delta_rule, "g_head")])
def test_ccq_backbone_grads(op, gate):
    x = make_inputs(13, "segments", t=40, k_norm=True)
    pos = [x["q"], x["k"], x["v"], x[gate]] + ([x["beta"]] if gate == "g_head" else []) + [x["lam"]]
    kw = {"initial_state": x["initial_state"], "initial_stats": ops.CCQStats(*x["initial_stats"])}
    _compare(op, pos, kw, x)
