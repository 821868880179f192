"""The generalized delta rule, S_t = (I - k_t a_t^T) Diag(exp g_t) S_{t-1} + k_t v_t^T, and its CCQ read: every form
against the independent float64 NumPy recurrence (outputs and final states), every gradient of the chunk and scan
forms against the recurrent one in float64, the gated delta rule as a case of it, strong and zero decay, packed
documents, an initial state, any T, bf16 inputs and the one-token decode step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import K, OP_CASES, float64_ground_truth, make_inputs, op_gradients, rel_rms
from tests.ops import numpy_reference as ref

FP32_TOL = 1e-5  # relative RMS against float64, as tests/ops/test_agreement.py
X64_TOL = 1e-10  # float64 forms against each other (measured ~1e-15)
OUT_TOL, GRAD_TOL, GATE_GRAD_TOL = 0.005, 0.008, 0.02  # fla's half-precision tolerances (tests/ops/test_bf16.py)
IMPLS = [("recurrent", None), ("scan", None), ("chunk", None), ("chunk", 16), ("chunk", 24)]
CASES = (*OP_CASES, "extreme")


def inputs(seed, case, t=70):
    """`make_inputs` (unit keys) plus GDN-2's gates b [B, T, H, K] and w [B, T, H, V] in [0, 1], QED's lam in
    [0, 0.25] and the QED erase vector a (not parallel to k). Case "extreme": g uniform in [-20, 0], half exactly 0."""
    x = make_inputs(seed, "segments" if case == "extreme" else case, t=t, k_norm=True)
    rng = np.random.default_rng(seed + 1000)
    f32 = lambda a: np.asarray(a, np.float32)
    if case == "extreme":
        x["g"] = f32(np.where(rng.random(x["g"].shape) < 0.5, 0.0, rng.uniform(-20, 0, x["g"].shape)))
    x.update(b=f32(rng.uniform(0, 1, x["g"].shape)), w=f32(rng.uniform(0, 1, x["v"].shape)),
             lam_qed=f32(rng.uniform(0, 0.25, x["beta"].shape)))
    x["a"] = f32(ref.qed_erase(x["q"], x["k"], x["b"], x["lam_qed"]))
    return x


def x64(tree):
    return jax.tree.map(lambda a: None if a is None else jnp.asarray(a, jnp.float64), tree)


def grads_x64(op, pos, kw, x, impl, chunk):
    with jax.enable_x64(True):
        return jax.tree.map(np.asarray, op_gradients(op, x64(pos), x64(kw), x, impl, chunk))


def compare_grads(op, pos, kw, x, impls=(("chunk", None), ("chunk", 24), ("scan", None))):
    """Every gradient of `impls` against the recurrent form, all in float64."""
    want = float64_ground_truth(op, pos, kw, x)
    for impl, chunk in impls:
        got = grads_x64(op, pos, kw, x, impl, chunk)
        for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
            assert np.all(np.isfinite(g)), f"{impl}/{chunk}: non-finite d{jax.tree_util.keystr(path)}"
            err = rel_rms(g, w)
            assert err < X64_TOL, f"{impl}/{chunk}: d{jax.tree_util.keystr(path)} relative RMS {err:.2e}"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_every_form_equals_the_numpy_recurrence(case, impl, chunk):
    x = inputs(1, case)
    o, s = ops.generalized_delta_rule(x["q"], x["k"], x["v"], x["g"], x["a"], scale=0.3,
                                      initial_state=x["initial_state"], output_final_state=True,
                                      segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    o_ref, s_ref = ref.generalized_delta_rule(x["q"], x["k"], x["v"], x["g"], x["a"], 0.3, x["initial_state"],
                                              x["segment_ids"])
    assert o.dtype == jnp.float32 and s.dtype == jnp.float32
    assert rel_rms(o, o_ref) < FP32_TOL and rel_rms(s, s_ref) < FP32_TOL


@pytest.mark.parametrize("case", ["strong_decay", "segments"])
def test_the_gated_delta_rule_is_a_case_of_it(case):
    """gated_delta_rule(q, k, v, g, beta) == generalized_delta_rule(q, k, beta v, g broadcast over K, beta k)."""
    x = inputs(2, case, t=45)
    with jax.enable_x64(True):
        q, k, v, g, beta, h0 = x64([x["q"], x["k"], x["v"], x["g_head"], x["beta"], x["initial_state"]])
        common = dict(initial_state=h0, output_final_state=True, segment_ids=x["segment_ids"])
        want = ops.gated_delta_rule(q, k, v, g, beta, impl="recurrent", **common)
        for impl, chunk in [("recurrent", None), ("chunk", None), ("chunk", 16), ("scan", None)]:
            got = ops.generalized_delta_rule(q, k, beta[..., None] * v, jnp.broadcast_to(g[..., None], k.shape),
                                             beta[..., None] * k, impl=impl, chunk_size=chunk, **common)
            same = ops.gated_delta_rule(q, k, v, g, beta, impl=impl, chunk_size=chunk, **common)
            for a, b, c in zip(got, want, same):
                assert rel_rms(a, b) < 1e-12 and rel_rms(c, b) < 1e-12, impl


@pytest.mark.parametrize("case", ["strong_decay", "zeroed_gates", "segments", "extreme"])
def test_every_gradient_of_the_chunk_and_scan_forms_equals_the_recurrence_in_float64(case):
    x = inputs(3, case, t=40)
    pos = [x["q"], x["k"], x["v"], x["g"], x["a"]]
    compare_grads(ops.generalized_delta_rule, pos, {"initial_state": x["initial_state"]}, x)


@pytest.mark.parametrize("t", [1, 5, 33])
def test_any_length_and_the_one_token_decode_step(t):
    """A run of t tokens, then one more token from its final state (the decode step: T = 1 through the op), equals
    the t + 1 tokens at once; recurrent and chunked alike."""
    x = inputs(4, "weak_decay", t=t + 1)
    args = [x[n] for n in ("q", "k", "v", "g", "a")]
    for impl in ("recurrent", "chunk"):
        full, s_full = ops.generalized_delta_rule(*args, initial_state=x["initial_state"], output_final_state=True,
                                                  impl=impl)
        o1, s1 = ops.generalized_delta_rule(*(a[:, :t] for a in args), initial_state=x["initial_state"],
                                            output_final_state=True, impl=impl)
        o2, s2 = ops.generalized_delta_rule(*(a[:, t:] for a in args), initial_state=s1, output_final_state=True,
                                            impl=impl)
        assert rel_rms(np.concatenate([o1, o2], axis=1), full) < FP32_TOL and rel_rms(s2, s_full) < FP32_TOL


@pytest.mark.parametrize("impl", ["recurrent", "chunk", "scan"])
def test_the_ccq_read_on_it_equals_the_numpy_composition(impl):
    x = inputs(5, "segments", t=37)
    o, (s, st) = ops.ccq_generalized_delta_rule(
        x["q"], x["k"], x["v"], x["g"], x["a"], x["lam"], initial_state=x["initial_state"],
        initial_stats=x["initial_stats"], output_final_state=True, output_final_stats=True,
        segment_ids=x["segment_ids"], impl=impl, chunk_size=16 if impl == "chunk" else None)
    q_clean, st_ref, _ = ref.ccq_query(x["q"], x["k"], x["lam"], initial_stats=x["initial_stats"],
                                       segment_ids=x["segment_ids"])
    o_ref, s_ref = ref.generalized_delta_rule(q_clean, x["k"], x["v"], x["g"], x["a"], K**-0.5, x["initial_state"],
                                              x["segment_ids"])
    assert rel_rms(o, o_ref) < FP32_TOL and rel_rms(s, s_ref) < FP32_TOL
    for a, b in zip(st, st_ref):
        assert rel_rms(a, b) < FP32_TOL


def test_every_gradient_of_the_ccq_read_on_it_in_float64():
    x = inputs(6, "segments", t=40)
    pos = [x["q"], x["k"], x["v"], x["g"], x["a"], x["lam"]]
    kw = {"initial_state": x["initial_state"], "initial_stats": ops.CCQStats(*x["initial_stats"])}
    compare_grads(ops.ccq_generalized_delta_rule, pos, kw, x, impls=(("chunk", 16), ("scan", None)))


@pytest.mark.parametrize("name", ["generalized_delta_rule", "qed"])
def test_bf16_inputs_with_fp32_states(name):
    """bf16 q, k, v (gates fp32, as models keep them) through the chunked form, against the float64 recurrence on
    the same bf16-rounded values: outputs in bf16, states in fp32, fla's half-precision tolerances."""
    x = inputs(7, "segments", t=70)
    gates = {"generalized_delta_rule": ["g", "a"], "qed": ["g", "b", "w", "lam_qed"]}[name]
    names = ["q", "k", "v", *gates]
    pos = [jnp.asarray(x[n], jnp.bfloat16) if n in "qkva" else x[n] for n in names]
    op = getattr(ops, name)
    kw = {"initial_state": x["initial_state"]}
    want = float64_ground_truth(op, [np.asarray(p, np.float32) for p in pos], kw, x)
    got = op_gradients(op, pos, kw, x, "chunk", None)
    for label, g, w in zip(["initial_state", *names], jax.tree.leaves(got), jax.tree.leaves(want)):
        tol = GRAD_TOL if label in ("initial_state", "q", "k", "v") else GATE_GRAD_TOL
        assert rel_rms(np.asarray(g, np.float32), w) < tol, label
    o, s = op(*pos, initial_state=x["initial_state"], segment_ids=x["segment_ids"], output_final_state=True)
    o_ref = op(*[np.asarray(p, np.float32) for p in pos], initial_state=x["initial_state"],
               segment_ids=x["segment_ids"], impl="recurrent")[0]
    assert o.dtype == jnp.bfloat16 and s.dtype == jnp.float32
    assert rel_rms(np.asarray(o, np.float32), o_ref) < OUT_TOL


def test_the_chunk_form_never_forms_the_per_channel_pairwise_decay():
    """The diagonal 16-token sub-blocks' decay exp(sum_{j < l <= i} g_l) per key channel, [..., 16, 16, K], is 16 times
    the size of q at K = 128 (4 GiB a chip for KDA-1.3B's 8 rows of 4096 on a TPU, several alive in the backward);
    `diagonal_scores` forms it one key position at a time. The compiled fwd+bwd's temporaries on a CPU: 2.5 copies'
    worth at this shape, against 6.9 when the decay was formed whole."""
    b, t, h, dk, dv = 1, 512, 2, 128, 32
    spec = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    args = (spec(b, t, h, dk), spec(b, t, h, dk), spec(b, t, h, dv), spec(b, t, h, dk), spec(b, t, h, dk))
    loss = lambda *xs: jnp.sum(ops.generalized_delta_rule(*xs, impl="chunk", chunk_size=64)[0])
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
    temp = grad.lower(*args).compile().memory_analysis().temp_size_in_bytes
    pairwise = b * h * t * 16 * dk * 4  # [B, H, T / 16 sub-blocks, 16, 16, K] fp32
    assert temp < 3 * pairwise, (temp, pairwise)
