"""Every impl of every op against the independent float64 NumPy recurrences (fp32 inputs)."""

import jax.numpy as jnp
import pytest

import ccq_jax.ops as ops
from tests.ops import numpy_reference as ref
from tests.builders import K, make_inputs, OP_CASES as CASES, rel_rms

FP32_TOL = 1e-5  # relative RMS; fp32 math lands near 1e-7
IMPLS = [("recurrent", None), ("scan", None), ("chunk", None), ("chunk", 16), ("chunk", 24)]


def _close(actual, expected, what):
    err = rel_rms(actual, expected)
    assert err < FP32_TOL, f"{what}: relative RMS {err:.2e}"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_gla(case, impl, chunk):
    x = make_inputs(1, case)
    o, s = ops.gla(x["q"], x["k"], x["v"], x["g"], initial_state=x["initial_state"], output_final_state=True,
                   segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    o_ref, s_ref = ref.gla(x["q"], x["k"], x["v"], x["g"], K**-0.5, x["initial_state"], x["segment_ids"])
    _close(o, o_ref, "o")
    _close(s, s_ref, "final_state")
    assert s.dtype == jnp.float32


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_gated_delta_rule(case, impl, chunk):
    x = make_inputs(2, case, k_norm=True)
    o, s = ops.gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"], scale=0.3,
                                initial_state=x["initial_state"], output_final_state=True,
                                segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    o_ref, s_ref = ref.gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"], 0.3, x["initial_state"],
                                        x["segment_ids"])
    _close(o, o_ref, "o")
    _close(s, s_ref, "final_state")


@pytest.mark.parametrize("centered,normalize_keys", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("case", ["weak_decay", "segments"])
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_ccq_query(case, impl, chunk, centered, normalize_keys):
    x = make_inputs(3, case)
    qc, st = ops.ccq_query(x["q"], x["k"], x["lam"], centered=centered, normalize_keys=normalize_keys,
                           initial_stats=x["initial_stats"], output_final_stats=True,
                           segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    qc_ref, st_ref, _ = ref.ccq_query(x["q"], x["k"], x["lam"], centered, normalize_keys, x["initial_stats"],
                                      x["segment_ids"])
    _close(qc, qc_ref, "q_clean")
    for name, a, b in zip(ops.CCQStats._fields, st, st_ref):
        _close(a, b, name)
        assert a.dtype == jnp.float32


@pytest.mark.parametrize("case", ["strong_decay", "segments"])
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_ccq_gla(case, impl, chunk):
    x = make_inputs(4, case)
    o, (s, st) = ops.ccq_gla(x["q"], x["k"], x["v"], x["g"], x["lam"], initial_state=x["initial_state"],
                             initial_stats=x["initial_stats"], output_final_state=True, output_final_stats=True,
                             segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    qc_ref, st_ref, _ = ref.ccq_query(x["q"], x["k"], x["lam"], initial_stats=x["initial_stats"],
                                      segment_ids=x["segment_ids"])
    o_ref, s_ref = ref.gla(qc_ref, x["k"], x["v"], x["g"], K**-0.5, x["initial_state"], x["segment_ids"])
    _close(o, o_ref, "o")
    _close(s, s_ref, "final_state")
    _close(st.cov, st_ref[0], "cov")


@pytest.mark.parametrize("case", ["zeroed_gates", "segments"])
@pytest.mark.parametrize("impl,chunk", IMPLS)
def test_ccq_gated_delta_rule(case, impl, chunk):
    x = make_inputs(5, case, k_norm=True)
    o, (s, st) = ops.ccq_gated_delta_rule(
        x["q"], x["k"], x["v"], x["g_head"], x["beta"], x["lam"], initial_state=x["initial_state"],
        initial_stats=x["initial_stats"], output_final_state=True, output_final_stats=True,
        segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
    qc_ref, st_ref, _ = ref.ccq_query(x["q"], x["k"], x["lam"], initial_stats=x["initial_stats"],
                                      segment_ids=x["segment_ids"])
    o_ref, s_ref = ref.gated_delta_rule(qc_ref, x["k"], x["v"], x["g_head"], x["beta"], K**-0.5,
                                        x["initial_state"], x["segment_ids"])
    _close(o, o_ref, "o")
    _close(s, s_ref, "final_state")
    _close(st.count, st_ref[2], "count")


@pytest.mark.parametrize("impl", ["recurrent", "chunk", "scan"])
def test_final_state_is_none_unless_asked(impl):
    x = make_inputs(6, "weak_decay", t=9)
    assert ops.gla(x["q"], x["k"], x["v"], x["g"], impl=impl)[1] is None
    assert ops.ccq_gla(x["q"], x["k"], x["v"], x["g"], x["lam"], impl=impl, output_final_stats=True)[1][0] is None


def test_without_initial_state_starts_from_zero():
    x = make_inputs(7, "weak_decay")
    o, _ = ops.gla(x["q"], x["k"], x["v"], x["g"])
    o_ref, _ = ref.gla(x["q"], x["k"], x["v"], x["g"], K**-0.5)
    _close(o, o_ref, "o")
    qc, _ = ops.ccq_query(x["q"], x["k"], x["lam"])
    _close(qc, ref.ccq_query(x["q"], x["k"], x["lam"])[0], "q_clean")
