"""The CCQ read policies (`read=`, `ccq_jax.ops.ReadPolicy`) and `covariance_apply`: every XLA form against the
independent float64 NumPy recurrence (outputs and final statistics), every gradient against the float64
recurrence, bf16 inputs, packed documents, the properties that define each policy, and the refusals."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import K, float64_ground_truth, make_inputs, op_gradients, rel_rms
from tests.ops import numpy_reference as ref

FP32_TOL = 1e-5  # as tests/ops/test_agreement.py
OUT_TOL, GRAD_TOL, GATE_GRAD_TOL = 0.005, 0.008, 0.02  # fla's half-precision tolerances (tests/ops/test_bf16.py)
IMPLS = [("recurrent", None), ("scan", None), ("chunk", None), ("chunk", 16), ("chunk", 24)]
POLICIES = [ops.ReadPolicy("neumann", terms=2), ops.ReadPolicy("neumann", terms=4), ops.ReadPolicy("cg", iterations=1),
            ops.ReadPolicy("cg", iterations=3)]


def _close(actual, expected, what, tol=FP32_TOL):
    err = rel_rms(actual, expected)
    assert err < tol, f"{what}: relative RMS {err:.2e}"


def _lam(x, policy):
    """lam in [0, 1], or in [0, 8] for cg (any lam >= 0 is allowed there)."""
    return x["lam"] * (8.0 if policy.kind == "cg" else 1.0)


def _count(policy):
    return policy.terms if policy.kind == "neumann" else policy.iterations


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("case", ["weak_decay", "segments"])
@pytest.mark.parametrize("policy", POLICIES, ids=str)
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_each_policy_on_each_form_equals_the_float64_recurrence(impl, chunk, policy, case, centered):
    x = make_inputs(30, case)
    lam = _lam(x, policy)
    qc, st = ops.ccq_query(x["q"], x["k"], lam, read=policy, centered=centered, initial_stats=x["initial_stats"],
                           output_final_stats=True, segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    _, st_ref, sigmas = ref.ccq_query(x["q"], x["k"], lam, centered, True, x["initial_stats"], x["segment_ids"])
    _close(qc, ref.read_policy(x["q"], lam, sigmas, policy.kind, _count(policy)), "q_clean")
    for name, a, b in zip(ops.CCQStats._fields, st, st_ref):
        _close(a, b, name)


@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_covariance_apply_is_sigma_times_x(impl, chunk):
    x = make_inputs(31, "segments")
    vectors = np.random.default_rng(0).standard_normal(x["q"].shape).astype(np.float32)
    out, st = ops.covariance_apply(vectors, x["k"], initial_stats=x["initial_stats"], output_final_stats=True,
                                   segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    _, st_ref, sigmas = ref.ccq_query(x["q"], x["k"], x["lam"], True, True, x["initial_stats"], x["segment_ids"])
    assert out.dtype == jnp.float32
    _close(out, np.einsum("bthij,bthj->bthi", sigmas, vectors), "Sigma x")
    _close(st.cov, st_ref[0], "cov")


@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_one_neumann_term_is_the_first_order_read_to_the_bit(impl, chunk):
    x = make_inputs(32, "segments")
    call = functools.partial(ops.ccq_query, x["q"], x["k"], x["lam"], segment_ids=x["segment_ids"], impl=impl,
                             chunk_size=chunk)
    first, neumann = call()[0], call(read=ops.ReadPolicy("neumann", terms=1))[0]
    np.testing.assert_array_equal(np.asarray(first), np.asarray(neumann))


def test_cg_with_k_iterations_solves_the_ridge_system_and_stays_stable_where_first_order_flips():
    # K steps of CG solve a K x K system in exact arithmetic; lam = 50 puts 1 - lam eig far below -1, where the
    # first-order read no longer contracts (it flips and grows the high-variance directions)
    x = make_inputs(33, "weak_decay", t=24)
    k = np.asarray(x["k"]) + 2.0 * np.random.default_rng(1).standard_normal((1, 1, 1, K)).astype(np.float32)
    lam = np.full(x["lam"].shape, 50.0, np.float32)
    with jax.enable_x64(True):
        q64, k64, lam64 = (jnp.asarray(a, jnp.float64) for a in (x["q"], k, lam))
        solved, _ = ops.ccq_query(q64, k64, lam64, read=ops.ReadPolicy("cg", iterations=K), impl="recurrent")
        _, _, sigmas = ref.ccq_query(x["q"], k, lam)
        exact = np.linalg.solve(np.eye(K) + lam[..., None, None] * sigmas, np.asarray(x["q"], np.float64)[..., None])
        _close(solved, exact[..., 0], "cg(K) against the exact solve", tol=1e-9)
    q_norm = np.linalg.norm(x["q"], axis=-1)
    cg_norm = np.linalg.norm(ops.ccq_query(x["q"], k, lam, read="cg")[0], axis=-1)
    assert np.all(cg_norm <= q_norm * (1 + 1e-5)), "one CG step from q is a contraction in the A-norm sense"
    assert np.all(np.isfinite(cg_norm))


@pytest.mark.parametrize("policy", [ops.ReadPolicy("neumann", terms=3), ops.ReadPolicy("cg", iterations=2)], ids=str)
@pytest.mark.parametrize("case", ["weak_decay", "segments"])
def test_gradients_of_every_input_on_every_form_equal_the_float64_recurrence(policy, case):
    x = make_inputs(34, case, t=40)
    x = {**x, "lam": _lam(x, policy)}
    op = functools.partial(ops.ccq_query, read=policy)
    pos, kw = [x["q"], x["k"], x["lam"]], {"initial_stats": ops.CCQStats(*x["initial_stats"])}
    want = float64_ground_truth(op, pos, kw, x)
    for impl, chunk in IMPLS:
        got = op_gradients(op, pos, kw, x, impl, chunk)
        for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
            assert np.all(np.isfinite(g)), f"{impl}/{chunk}: non-finite d{jax.tree_util.keystr(path)}"
            _close(g, w, f"{impl}/{chunk} d{jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("op,gate", [(ops.ccq_gla, "g"), (ops.ccq_gated_delta_rule, "g_head")])
def test_the_fused_ops_read_with_the_policy_gradients_included(op, gate):
    policy = ops.ReadPolicy("cg", iterations=2)
    x = make_inputs(35, "segments", t=40, k_norm=True)
    x = {**x, "lam": _lam(x, policy)}
    rest = [x["v"], x[gate]] + ([x["beta"]] if gate == "g_head" else [])
    o, (s, _) = op(x["q"], x["k"], *rest, x["lam"], read=policy, initial_state=x["initial_state"],
                   output_final_state=True, segment_ids=x["segment_ids"])
    _, _, sigmas = ref.ccq_query(x["q"], x["k"], x["lam"], segment_ids=x["segment_ids"])
    qc = ref.read_policy(x["q"], x["lam"], sigmas, "cg", 2)
    backbone = ref.gla if gate == "g" else ref.gated_delta_rule
    o_ref, s_ref = backbone(qc, x["k"], *rest, K**-0.5, x["initial_state"], x["segment_ids"])
    _close(o, o_ref, "o")
    _close(s, s_ref, "final_state")
    fused = functools.partial(op, read=policy)
    pos = [x["q"], x["k"], *rest, x["lam"]]
    kw = {"initial_state": x["initial_state"], "initial_stats": ops.CCQStats(*x["initial_stats"])}
    want = float64_ground_truth(fused, pos, kw, x)
    got = op_gradients(fused, pos, kw, x, "chunk", None)
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        _close(g, w, f"d{jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("policy", [ops.ReadPolicy("neumann", terms=2), ops.ReadPolicy("cg", iterations=2)], ids=str)
def test_bf16_inputs_through_the_chunked_form(policy):
    x = make_inputs(36, "segments", t=70, k_norm=True)
    bf16 = lambda a: jnp.asarray(a, jnp.bfloat16)
    lam = _lam(x, policy)
    op = functools.partial(ops.ccq_gla, read=policy)
    pos = [bf16(x["q"]), bf16(x["k"]), bf16(x["v"]), x["g"], lam]
    kw = {"initial_state": x["initial_state"]}
    want = float64_ground_truth(op, [np.asarray(p, np.float32) for p in pos], kw, x)
    got = op_gradients(op, pos, kw, x, "chunk", None)
    for label, g, w in zip(["initial_state", "q", "k", "v", "g", "lam"], jax.tree.leaves(got), jax.tree.leaves(want)):
        tol = GATE_GRAD_TOL if label in ("g", "lam") else GRAD_TOL
        _close(np.asarray(g, np.float32), w, f"d{label}", tol)
    o = op(*pos, segment_ids=x["segment_ids"])[0]
    o_ref = op(*[np.asarray(p, np.float32) for p in pos], segment_ids=x["segment_ids"], impl="recurrent")[0]
    assert o.dtype == jnp.bfloat16
    _close(np.asarray(o, np.float32), o_ref, "o", OUT_TOL)


def test_refusals_name_the_argument():
    x = make_inputs(37, "weak_decay", t=8)
    q, k, lam = x["q"], x["k"], x["lam"]
    with pytest.raises(ValueError, match=r"read: expected one of \['first_order', 'neumann', 'cg'\]"):
        ops.ccq_query(q, k, lam, read="newton")
    with pytest.raises(ValueError, match=r"read.terms: expected a positive integer, got 0"):
        ops.ccq_query(q, k, lam, read=ops.ReadPolicy("neumann", terms=0))
    with pytest.raises(ValueError, match=r"read.iterations: expected a positive integer, got 1.5"):
        ops.ccq_query(q, k, lam, read=ops.ReadPolicy("cg", iterations=1.5))
    with pytest.raises(ValueError, match=r"lam: expected values in \[0, 1\]"):
        ops.ccq_query(q, k, lam + 1.0, read="neumann")
    ops.ccq_query(q, k, lam + 1.0, read="cg")  # any lam >= 0
    with pytest.raises(ValueError, match=r"lam: expected values in \[0, inf\]"):
        ops.ccq_query(q, k, lam - 2.0, read="cg")
    with pytest.raises(ValueError, match=r"read: 'cg' runs on impl 'recurrent', 'chunk' or 'scan'; the kernels"):
        ops.ccq_gla(q, k, x["v"], x["g"], lam, read="cg", impl="pallas")
    with pytest.raises(ValueError, match=r"impl: covariance_apply runs on \['recurrent', 'chunk', 'scan'\]"):
        ops.covariance_apply(q, k, impl="pallas")
