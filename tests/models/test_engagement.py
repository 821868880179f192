"""ccq_jax/engagement.py, the read-engagement instrument: a positive control (keys along one direction: Sigma of rank one,
a known contraction), a negative one (isotropic keys: eig_max ~ 1/K, an effective rank near K), the layer's own
policy, and a model with CCQ off refused."""

import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from ccq_jax.engagement import format_table, layer_engagement, read_engagement
from tests.builders import build, token_ids

B, T, H, K = 2, 64, 2, 16


def _engagement(q, k, lam, read=ops.ReadPolicy(), centered=False, positions=None):
    positions = np.ones((B, T), bool) if positions is None else positions
    out = layer_engagement(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32), jnp.asarray(lam, jnp.float32),
                           jnp.ones((B, T), jnp.int32), jnp.asarray(positions), read=read, centered=centered,
                           normalize_keys=True)
    return {name: np.asarray(a) for name, a in out.items()}


def test_keys_along_one_direction_give_a_rank_one_sigma_and_the_contraction_lambda_predicts():
    e1 = np.zeros(K, np.float32)
    e1[0] = 1
    k = np.broadcast_to(3 * e1, (B, T, H, K))  # normalised: e1, so Sigma = e1 e1^T uncentred
    q = np.broadcast_to(e1 + np.eye(K, dtype=np.float32)[1], (B, T, H, K))  # half its energy along e1
    lam = np.full((B, T, H), 0.5, np.float32)
    out = _engagement(q, k, lam)
    np.testing.assert_allclose(out["sigma_top"][:, 0], 1.0, atol=1e-5)
    np.testing.assert_allclose(out["sigma_top"][:, 1], 0.0, atol=1e-5)
    np.testing.assert_allclose(out["effective_rank"], 1.0, atol=1e-4)
    np.testing.assert_allclose(out["available_mean"], 2 ** -0.5, rtol=1e-5)  # |Sigma q| / |q| = 1 / sqrt(2)
    np.testing.assert_allclose(out["applied_mean"], 0.5 * 2 ** -0.5, rtol=1e-5)
    np.testing.assert_allclose(out["lambda_mean"], 0.5)
    # centred, the single direction is the mean: nothing is left to contract
    np.testing.assert_allclose(_engagement(q, k, lam, centered=True)["applied_mean"], 0.0, atol=1e-5)


def test_isotropic_keys_leave_the_first_order_read_nearly_inert():
    rng = np.random.default_rng(0)
    k, q = rng.standard_normal((2, B, T, H, K)).astype(np.float32)
    out = _engagement(q, k, np.ones((B, T, H), np.float32), centered=True)
    assert np.all(out["sigma_top"][:, 0] < 4.0 / K)  # eig_max ~ 1/K (finite-sample spread above it)
    assert np.all(out["effective_rank"] > 0.6 * K)
    assert np.all(out["applied_mean"] < 0.3)


def test_positions_select_the_tokens_of_the_second_average_and_cg_contracts_more():
    rng = np.random.default_rng(1)
    direction = rng.standard_normal(K).astype(np.float32)
    k = (rng.standard_normal((B, T, H, K)) * 0.2 + direction).astype(np.float32)  # one dominant direction
    q = np.broadcast_to(direction, (B, T, H, K)).astype(np.float32)
    positions = np.zeros((B, T), bool)
    positions[:, -8:] = True
    lam = np.full((B, T, H), 0.5, np.float32)
    first = _engagement(q, k, lam, positions=positions)
    assert not np.allclose(first["applied_at_positions"], first["applied_mean"])
    # (I + 8 Sigma)^-1 q: along a direction of eigenvalue ~1 it keeps ~1/9 of q, the first-order read at 0.5 ~1/2
    cg = _engagement(q, k, 16 * lam, read=ops.ReadPolicy("cg", iterations=4), positions=positions)
    assert np.all(cg["applied_at_positions"] > first["applied_at_positions"])


def test_a_model_reports_every_ccq_layer_and_one_without_the_read_is_refused():
    model = build("ccq-gla-tiny")
    report = read_engagement(model, token_ids((2, 32)))
    assert [layer["layer"] for layer in report["layers"]] == list(range(len(model.layers)))
    heads = report["layers"][0]["heads"]
    assert len(heads["lambda_mean"]) == model.config.num_heads and 0 < report["summary"]["applied_mean"] < 1
    table = format_table(report)  # no positions given: nothing averaged there, shown as such and not as 0 %
    assert report["num_positions"] == 0 and "at the positions" not in table and " -  " in table.splitlines()[1]
    at_end = read_engagement(model, token_ids((2, 32)), positions=np.arange(32)[None].repeat(2, 0) >= 28)
    assert at_end["num_positions"] == 8 and "at the positions" in format_table(at_end)
    with pytest.raises(ValueError, match=r"model: no CCQ read to measure \(family 'gla', ccq absent\)"):
        read_engagement(build("gla-tiny"), token_ids((2, 32)))


@pytest.mark.parametrize("policy", ["dots", "block"])
def test_the_read_runs_on_a_model_whose_blocks_are_recomputed(policy):
    """The engagement read captures what the layers sow; under a block remat policy that capture failed inside
    `nnx.remat` (the learning guard's ccq-gla-tiny under "dots"). The read is a forward: the same report."""
    ids = token_ids((2, 32))
    plain = read_engagement(build("ccq-gla-tiny"), ids)["summary"]
    recomputed = read_engagement(build("ccq-gla-tiny", {"remat_policy": policy}), ids)["summary"]
    assert recomputed.keys() == plain.keys()
    for name, value in plain.items():
        np.testing.assert_allclose(recomputed[name], value, rtol=1e-6, atol=1e-7)
