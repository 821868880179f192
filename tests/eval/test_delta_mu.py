"""Delta-mu: a float64 NumPy reference, its sign on constructed keys, and errors naming the bad argument."""

import numpy as np
import pytest

from eval.delta_mu import delta_mu, format_table, key_alignment, plot_heatmap, plot_histograms, summarize


def _reference(keys, q, top_k, centered):
    k = keys[: q + 1].astype(np.float64)
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    out = []
    for h in range(k.shape[1]):
        kh = k[:, h]
        sigma = kh.T @ kh / len(kh)
        if centered:
            mu = kh.mean(axis=0)
            sigma -= np.outer(mu, mu)
        basis = np.linalg.eigh(sigma)[1][:, -top_k:]
        out.append(np.sum((kh @ basis) ** 2, axis=-1) / np.sum(kh * kh, axis=-1))
    return np.stack(out)


@pytest.mark.parametrize("centered", [True, False])
def test_alignment_matches_float64_reference(centered):
    keys = np.random.default_rng(0).normal(size=(50, 3, 8)) * np.linspace(3, 0.3, 8)
    got = key_alignment(keys.astype(np.float32), 39, top_k=3, centered=centered)
    assert got.shape == (3, 40)
    np.testing.assert_allclose(got, _reference(keys, 39, 3, centered), atol=1e-5)
    # keys after the query do not matter
    later = keys.copy()
    later[40:] *= 100
    np.testing.assert_allclose(key_alignment(later.astype(np.float32), 39, top_k=3, centered=centered), got, atol=1e-6)


def _keys(needle_direction, rng, t=300, k=8):
    """Distractors with large variance in dims 0-3 and small in 4-7; one needle key at position 100."""
    keys = rng.normal(size=(t, 1, k)) * np.array([3, 3, 3, 3, 0.8, 0.8, 0.8, 0.8])
    keys[100, 0] = np.eye(k)[needle_direction]
    return keys.astype(np.float32)


def test_sign_on_constructed_keys():
    rng = np.random.default_rng(1)
    low = delta_mu([_keys(7, rng), _keys(6, rng)], [100], 250, top_k=4)
    high = delta_mu([_keys(0, rng), _keys(2, rng)], [100], 250, top_k=4)
    assert low.delta.shape == (2, 1) and np.all(low.delta < -0.5)
    assert np.all(high.delta > 0.03)
    assert np.all(high.needle > 0.99) and np.all(low.needle < 0.01)


def test_summary_table_and_pictures(tmp_path):
    rng = np.random.default_rng(2)
    results = [delta_mu([_keys(7, rng), _keys(0, rng)], [100, 101], 200, top_k=4) for _ in range(2)]
    s = summarize(results)
    assert s["num_prompts"] == 2 and len(s["layers"]) == 2
    assert s["layers"][0]["delta_mu"] < 0 < s["layers"][1]["delta_mu"]
    assert s["layers"][0]["heads_negative"] == 1.0
    assert "mean Delta-mu" in format_table(s)
    for png in (plot_heatmap(s, tmp_path / "h.png"), plot_histograms(results, tmp_path / "hist.png")):
        assert png.read_bytes()[:4] == b"\x89PNG"


ONE_LAYER = [np.ones((10, 1, 4), np.float32)]


@pytest.mark.parametrize(
    "keys,kwargs,msg",
    [
        (ONE_LAYER, dict(needle_positions=[], query_position=5),
         r"needle_positions: expected a non-empty set of positions in \[0, 5\], got \[\]"),
        (ONE_LAYER, dict(needle_positions=[6], query_position=5), r"needle_positions: .* in \[0, 5\], got \[6\]"),
        (ONE_LAYER, dict(needle_positions=[-1], query_position=5), r"needle_positions: .* in \[0, 5\], got \[-1\]"),
        (ONE_LAYER, dict(needle_positions=range(6), query_position=5),
         r"needle_positions: every token up to the query is a needle token; no distractor is left"),
        (ONE_LAYER, dict(needle_positions=[1], query_position=10),
         r"query_position: expected an index in \[0, 10\), got 10"),
        (ONE_LAYER, dict(needle_positions=[1], query_position=5, top_k=4),
         r"top_k: expected 1 <= top_k < K=4 .*, got 4"),
        (ONE_LAYER, dict(needle_positions=[1], query_position=5, top_k=0),
         r"top_k: expected 1 <= top_k < K=4 .*, got 0"),
        ([np.ones((10, 4), np.float32)], dict(needle_positions=[1], query_position=5),
         r"keys: expected \[T, H, K\], got shape \(10, 4\)"),
        ([], dict(needle_positions=[1], query_position=5),
         r"keys_per_layer: expected one \[T, H, K\] array per layer, got none"),
    ],
)
def test_errors(keys, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        delta_mu(keys, **kwargs)
