"""Random inputs for the op tests: fla's gate recipes (weak and strong decay, zeroed gates), packed segments."""

import numpy as np
import pytest

B, T, H, K, V = 2, 70, 2, 16, 12

CASES = ("weak_decay", "strong_decay", "zeroed_gates", "segments")


def rel_rms(actual, expected):
    """fla's metric: ||actual - expected||_2 / ||expected||_2 (in float64)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def log_decay(rng, shape, case):
    x = rng.standard_normal(shape)
    if case == "strong_decay":
        return -np.logaddexp(0, -x) / 0.1  # logsigmoid(x) / 0.1: decays of exp(-7) per token
    g = -np.logaddexp(0, -(x + 3))  # logsigmoid(x + 3): mild decay
    if case == "zeroed_gates":
        g = np.where(rng.random(shape) < 0.5, 0.0, g)
    return g


def make_inputs(seed, case, t=T, k_norm=False):
    """Inputs for every op as float32 NumPy arrays, plus initial state / statistics and segment ids."""
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, np.float32)
    k = rng.standard_normal((B, t, H, K))
    if k_norm:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    segments = None
    if case == "segments":
        # several documents per row, including one id that comes back after another
        cuts = [t // 7, t // 3 + 1, (9 * t) // 10 - t // 7 - t // 3 - 1]
        lengths = [cuts + [t - sum(cuts)], [t - 5, 5]]
        segments = np.stack([np.repeat([0, 1, 2, 1], lengths[0]), np.repeat([7, 3], lengths[1])]).astype(np.int32)
    init_k = rng.standard_normal((B, H, 5, K))
    init_k /= np.linalg.norm(init_k, axis=-1, keepdims=True)
    return dict(
        q=f32(rng.standard_normal((B, t, H, K))),
        k=f32(k),
        v=f32(rng.standard_normal((B, t, H, V))),
        g=f32(log_decay(rng, (B, t, H, K), case)),
        g_head=f32(log_decay(rng, (B, t, H), case)),
        beta=f32(rng.uniform(0, 1, (B, t, H))),
        lam=f32(rng.uniform(0, 1, (B, t, H))),
        initial_state=f32(rng.standard_normal((B, H, K, V))),
        initial_stats=(f32(np.einsum("bhnk,bhnl->bhkl", init_k, init_k)), f32(init_k.sum(2)), f32(np.full((B, H), 5.0))),
        segment_ids=segments,
    )


@pytest.fixture
def rel():
    return rel_rms
