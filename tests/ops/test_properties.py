"""Properties of the CCQ read and of state hand-over that hold whatever the implementation."""

import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.ops import numpy_reference as ref
from tests.builders import make_inputs, rel_rms


@pytest.mark.parametrize("centered", [True, False])
def test_contraction_eigenvalues_lie_in_one_minus_lam_to_one(centered):
    """With normalised keys, Sigma_t has eigenvalues in [0, 1], so I - lam Sigma_t has them in [1 - lam, 1]."""
    x = make_inputs(40, "segments")
    x["k"] = x["k"] * np.random.default_rng(0).uniform(0.1, 30, x["k"].shape[:-1] + (1,)).astype(np.float32)
    _, _, sigmas = ref.ccq_query(x["q"], x["k"], x["lam"], centered=centered, segment_ids=x["segment_ids"])
    eig = np.linalg.eigvalsh(sigmas)  # [B, T, H, K]
    assert eig.min() > -1e-9 and eig.max() < 1 + 1e-9
    lam = x["lam"][..., None].astype(np.float64)
    contraction = 1 - lam * eig
    assert np.all(contraction >= 1 - lam - 1e-9) and np.all(contraction <= 1 + 1e-9)

    # and the JAX read applies exactly that operator: ||q_clean|| <= ||q|| >= (1 - lam) ||q||
    q_clean, _ = ops.ccq_query(x["q"], x["k"], x["lam"], centered=centered, segment_ids=x["segment_ids"])
    ratio = np.linalg.norm(np.asarray(q_clean), axis=-1) / np.linalg.norm(x["q"], axis=-1)
    assert np.all(ratio <= 1 + 1e-5) and np.all(ratio >= 1 - x["lam"] - 1e-5)


@pytest.mark.parametrize("impl", ["recurrent", "chunk", "scan"])
def test_lam_zero_is_identity_and_ccq_off_equals_backbone(impl):
    x = make_inputs(41, "weak_decay", t=33)
    zero = np.zeros_like(x["lam"])
    q_clean, _ = ops.ccq_query(x["q"], x["k"], zero, impl=impl)
    np.testing.assert_array_equal(np.asarray(q_clean), x["q"])
    o_ccq, _ = ops.ccq_gla(x["q"], x["k"], x["v"], x["g"], zero, impl=impl)
    o_gla, _ = ops.gla(x["q"], x["k"], x["v"], x["g"], impl=impl)
    np.testing.assert_allclose(np.asarray(o_ccq), np.asarray(o_gla), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("impl", ["recurrent", "chunk", "scan"])
def test_state_hand_over_splits_a_sequence(impl):
    """Running T tokens at once equals running them in two pieces with the first piece's final state."""
    x = make_inputs(42, "zeroed_gates", t=50, k_norm=True)
    args = (x["q"], x["k"], x["v"], x["g_head"], x["beta"], x["lam"])
    full, (s_full, st_full) = ops.ccq_gated_delta_rule(*args, output_final_state=True, output_final_stats=True, impl=impl)
    first = [a[:, :29] for a in args]
    second = [a[:, 29:] for a in args]
    o1, (s1, st1) = ops.ccq_gated_delta_rule(*first, output_final_state=True, output_final_stats=True, impl=impl)
    o2, (s2, st2) = ops.ccq_gated_delta_rule(*second, initial_state=s1, initial_stats=st1, output_final_state=True,
                                             output_final_stats=True, impl=impl)
    assert rel_rms(np.concatenate([o1, o2], axis=1), full) < 1e-5
    assert rel_rms(s2, s_full) < 1e-5
    for a, b in zip(st2, st_full):
        assert rel_rms(a, b) < 1e-6


def test_documents_do_not_see_each_other():
    """A packed row equals its documents run one by one (initial state only on the first)."""
    x = make_inputs(43, "segments", t=40)
    seg = x["segment_ids"][:1]
    row = {n: x[n][:1] for n in ("q", "k", "v", "g", "lam")}
    packed, _ = ops.ccq_gla(row["q"], row["k"], row["v"], row["g"], row["lam"], segment_ids=seg,
                            initial_state=x["initial_state"][:1])
    starts = [0] + list(np.flatnonzero(np.diff(seg[0])) + 1) + [40]
    pieces = []
    for i, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        init = x["initial_state"][:1] if i == 0 else None
        o, _ = ops.ccq_gla(*(row[n][:, a:b] for n in ("q", "k", "v", "g", "lam")), initial_state=init)
        pieces.append(np.asarray(o))
    assert rel_rms(packed, np.concatenate(pieces, axis=1)) < 1e-5


def test_centering_uses_the_mean_of_normalised_keys():
    """Two keys along e0 and e1: Sigma = diag(1/4, 1/4) - off-diagonal 1/4 terms (uncentered: diag(1/2, 1/2))."""
    k = np.zeros((1, 2, 1, 2), np.float32)
    k[0, 0, 0, 0], k[0, 1, 0, 1] = 3.0, 0.5  # norms differ: normalisation removes them
    q = np.zeros_like(k)
    q[0, :, 0, 0] = 1.0
    lam = np.ones((1, 2, 1), np.float32)
    centered, _ = ops.ccq_query(q, k, lam, impl="recurrent")
    uncentered, _ = ops.ccq_query(q, k, lam, centered=False, impl="recurrent")
    # at t=1: C/n = diag(.5, .5), mean = (.5, .5): Sigma e0 = (.5 - .25, -.25)
    np.testing.assert_allclose(np.asarray(centered)[0, 1, 0], [1 - 0.25, 0.25], atol=1e-5)
    np.testing.assert_allclose(np.asarray(uncentered)[0, 1, 0], [0.5, 0.0], atol=1e-5)
