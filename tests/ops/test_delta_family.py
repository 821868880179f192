"""The generalized delta rule's named members (`kda`, `gated_delta_rule_2`, `qed`) and their CCQ versions against
float64 NumPy recurrences written from fla's formulas (`naive_recurrent_gdn2` for GDN-2), their gradients in
float64, and bad input refused by name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import K, float64_ground_truth, make_inputs, op_gradients, rel_rms
from tests.ops import numpy_reference as ref

FP32_TOL, X64_TOL = 1e-5, 1e-10


def inputs(seed, t=37):
    """`make_inputs` with unit keys and packed documents, GDN-2's gates b, w in [0, 1] and QED's lam in [0, 0.25]."""
    x = make_inputs(seed, "segments", t=t, k_norm=True)
    rng = np.random.default_rng(seed + 1000)
    f32 = lambda a: np.asarray(a, np.float32)
    return {**x, "b": f32(rng.uniform(0, 1, x["g"].shape)), "w": f32(rng.uniform(0, 1, x["v"].shape)),
            "lam_qed": f32(rng.uniform(0, 0.25, x["beta"].shape))}


MEMBERS = {  # name: (op, its gate inputs, (numpy erase vector, numpy written value) of the inputs)
    "kda": (ops.kda, ["beta"], lambda x: (x["beta"][..., None] * x["k"], x["beta"][..., None] * x["v"])),
    "gated_delta_rule_2": (ops.gated_delta_rule_2, ["b", "w"], None),  # checked against ref.gdn2 itself
    "qed": (ops.qed, ["b", "w", "lam_qed"], lambda x: (ref.qed_erase(x["q"], x["k"], x["b"], x["lam_qed"]),
                                                       x["w"] * x["v"])),
}


def numpy_member(name, x, q=None):
    """The member's float64 NumPy recurrence (o, final state), read with the query `q` (default x["q"])."""
    q = x["q"] if q is None else q
    rest = (K**-0.5, x["initial_state"], x["segment_ids"])
    if name == "gated_delta_rule_2":
        return ref.gdn2(q, x["k"], x["v"], x["g"], x["b"], x["w"], *rest)
    a, u = MEMBERS[name][2](x)
    return ref.generalized_delta_rule(q, x["k"], u, x["g"], a, *rest)


@pytest.mark.parametrize("name", list(MEMBERS))
@pytest.mark.parametrize("impl,chunk", [("recurrent", None), ("chunk", 16), ("scan", None)])
def test_each_member_equals_its_numpy_recurrence(name, impl, chunk):
    x = inputs(1)
    op, gates = MEMBERS[name][:2]
    o, s = op(x["q"], x["k"], x["v"], x["g"], *(x[n] for n in gates), initial_state=x["initial_state"],
              output_final_state=True, segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    o_ref, s_ref = numpy_member(name, x)
    assert rel_rms(o, o_ref) < FP32_TOL and rel_rms(s, s_ref) < FP32_TOL


@pytest.mark.parametrize("project,gate_query", [(False, True), (True, False), (False, False)])
def test_the_qed_switches(project, gate_query):
    x = inputs(2)
    o, _ = ops.qed(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], x["lam_qed"], project=project,
                   gate_query=gate_query, segment_ids=x["segment_ids"], initial_state=x["initial_state"])
    a = ref.qed_erase(x["q"], x["k"], x["b"], x["lam_qed"], project=project, gate_query=gate_query)
    o_ref, _ = ref.generalized_delta_rule(x["q"], x["k"], x["w"] * x["v"], x["g"], a, K**-0.5, x["initial_state"],
                                          x["segment_ids"])
    assert rel_rms(o, o_ref) < FP32_TOL


def test_qed_with_lam_zero_is_gdn2_and_gdn2_with_scalar_gates_is_kda():
    x = inputs(3)
    base = (x["q"], x["k"], x["v"], x["g"])
    gdn2 = ops.gated_delta_rule_2(*base, x["b"], x["w"])[0]
    np.testing.assert_array_equal(ops.qed(*base, x["b"], x["w"], np.zeros_like(x["lam_qed"]))[0], gdn2)
    beta = x["beta"][..., None]
    np.testing.assert_allclose(ops.gated_delta_rule_2(*base, np.broadcast_to(beta, x["b"].shape),
                                                      np.broadcast_to(beta, x["w"].shape))[0],
                               ops.kda(*base, x["beta"])[0], rtol=1e-6, atol=1e-6)


def test_kda_normalises_q_and_k_when_asked():
    x = inputs(4)
    got = ops.kda(x["q"], x["k"] * 3, x["v"], x["g"], x["beta"], use_qk_l2norm_in_kernel=True)[0]
    want = ops.kda(ops.l2_normalize(x["q"]), ops.l2_normalize(x["k"] * 3), x["v"], x["g"], x["beta"])[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(MEMBERS))
def test_every_gradient_of_each_member_in_float64(name):
    x = inputs(5, t=40)
    op, gates = MEMBERS[name][:2]
    pos = [x["q"], x["k"], x["v"], x["g"], *(x[n] for n in gates)]
    kw = {"initial_state": x["initial_state"]}
    want = float64_ground_truth(op, pos, kw, x)
    with jax.enable_x64(True):
        to64 = lambda a: jnp.asarray(a, jnp.float64)
        got = op_gradients(op, jax.tree.map(to64, pos), jax.tree.map(to64, kw), x, "chunk", 16)
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        assert rel_rms(g, w) < X64_TOL, f"d{jax.tree_util.keystr(path)}"


@pytest.mark.parametrize("name,ccq_op", [("kda", ops.ccq_kda), ("gated_delta_rule_2", ops.ccq_gated_delta_rule_2),
                                         ("qed", ops.ccq_qed)])
def test_the_ccq_read_composes_with_each_member(name, ccq_op):
    x = inputs(6)
    op, gates = MEMBERS[name][:2]
    args = (x["q"], x["k"], x["v"], x["g"], *(x[n] for n in gates))
    common = dict(initial_state=x["initial_state"], segment_ids=x["segment_ids"], output_final_state=True)
    o, (s, st) = ccq_op(*args, x["lam"], initial_stats=x["initial_stats"], output_final_stats=True, **common)
    q_clean, st_ref, _ = ref.ccq_query(x["q"], x["k"], x["lam"], initial_stats=x["initial_stats"],
                                       segment_ids=x["segment_ids"])
    o_ref, s_ref = numpy_member(name, x, q=q_clean)
    assert rel_rms(o, o_ref) < FP32_TOL and rel_rms(s, s_ref) < FP32_TOL and rel_rms(st.cov, st_ref[0]) < FP32_TOL
    off, (s_off, _) = ccq_op(*args, np.zeros_like(x["lam"]), **common)
    plain, s_plain = op(*args, **common)
    np.testing.assert_allclose(off, plain, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s_off, s_plain, rtol=1e-6, atol=1e-6)


def _call(op, names, x, **kw):
    values = [kw.pop(n, x[n]) for n in names]
    return op(*values, **kw)


GDR = (ops.generalized_delta_rule, ("q", "k", "v", "g", "a"))
KDA = (ops.kda, ("q", "k", "v", "g", "beta"))
GDN2 = (ops.gated_delta_rule_2, ("q", "k", "v", "g", "b", "w"))
QED = (ops.qed, ("q", "k", "v", "g", "b", "w", "lam_qed"))
BAD = [
    (GDR, {"a": np.zeros((2, 8, 2, 12), np.float32)},
     r"a: expected shape \[B=2, T=8, H=2, K=16\], got \(2, 8, 2, 12\)"),
    (GDR, {"a": np.full((2, 8, 2, 16), np.inf, np.float32)}, r"a: expected finite values"),
    (GDR, {"g": np.zeros((2, 8, 2), np.float32)}, r"g: expected shape \[B=2, T=8, H=2, K=16\]"),
    (GDR, {"g": np.full((2, 8, 2, 16), 0.5, np.float32)}, r"g: expected values in \[-inf, 0\] \(log decay"),
    (GDR, {"q": np.zeros((2, 8, 2, 16), np.int32)}, r"q: expected a floating dtype"),
    (GDR, {"a": np.zeros((2, 8, 2, 16), np.int32)}, r"a: expected a floating dtype"),
    (GDR, {"v": np.zeros((2, 7, 2, 12), np.float32)}, r"v: expected shape \[B=2, T=8, H=2, V\]"),
    (GDR, {"impl": "pallas_mosaic_gpu"}, r"impl: generalized_delta_rule has no 'pallas_mosaic_gpu' backend"),
    (KDA, {"beta": np.full((2, 8, 2), 2.5, np.float32)}, r"beta: expected values in \[0, 2\] \(delta-rule step size"),
    (KDA, {"beta": np.zeros((2, 8, 2, 16), np.float32)}, r"beta: expected shape \[B=2, T=8, H=2\]"),
    (GDN2, {"b": np.full((2, 8, 2, 16), 1.5, np.float32)}, r"b: expected values in \[0, 1\] \(erase gate"),
    (GDN2, {"b": np.zeros((2, 8, 2), np.float32)}, r"b: expected shape \[B=2, T=8, H=2, K=16\]"),
    (GDN2, {"w": np.full((2, 8, 2, 12), -0.5, np.float32)}, r"w: expected values in \[0, 1\] \(write gate"),
    (GDN2, {"w": np.zeros((2, 8, 2, 16), np.float32)}, r"w: expected shape \[B=2, T=8, H=2, V=12\]"),
    (QED, {"lam_qed": np.full((2, 8, 2), 1.5, np.float32)}, r"lam: expected values in \[0, 1\] \(QED"),
    (QED, {"lam_qed": np.zeros((2, 8), np.float32)}, r"lam: expected shape \[B=2, T=8, H=2\]"),
]


@pytest.mark.parametrize("op_names,kw,match", BAD)
def test_bad_input_is_refused_by_name(op_names, kw, match):
    x = inputs(7, t=8)
    x["a"] = x["k"]
    with pytest.raises(ValueError, match=match):
        _call(*op_names, x, **kw)


def test_the_ccq_gate_is_checked():
    x = inputs(8, t=8)
    with pytest.raises(ValueError, match=r"lam: expected values in \[0, 1\] \(CCQ gate lambda\)"):
        ops.ccq_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], np.full_like(x["lam"], 2.0))
    with pytest.raises(ValueError, match=r"ccq_lam: expected values in \[0, 1\] \(CCQ gate lambda\)"):
        ops.ccq_qed(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], x["lam_qed"], np.full_like(x["lam"], 2.0))
    with pytest.raises(ValueError, match=r"lam: expected values in \[0, 1\] \(QED"):
        ops.ccq_qed(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], np.full_like(x["lam"], 2.0), x["lam"])
