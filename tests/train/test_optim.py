"""Learning-rate schedules, the weight-decay mask, and `OptimConfig` errors naming the field."""

import jax.numpy as jnp
import numpy as np
import pytest

from train.optim import OptimConfig, decay_mask, learning_rate


@pytest.mark.parametrize("schedule", ["cosine", "wsd", "constant"])
def test_schedule_warms_up_then_decays(schedule):
    cfg = OptimConfig(lr=1.0, min_lr_ratio=0.1, warmup_steps=10, schedule=schedule)
    lr = learning_rate(cfg, total_steps=100)
    assert float(lr(0)) == pytest.approx(0.1)
    assert float(lr(9)) == pytest.approx(1.0)
    end = float(lr(100))
    assert end == pytest.approx(1.0 if schedule == "constant" else 0.1, abs=1e-6)
    values = np.array([float(lr(s)) for s in range(10, 101)])
    assert np.all(np.diff(values) <= 1e-7)
    if schedule == "wsd":
        assert values[60] == pytest.approx(1.0)  # stable phase before the last 20%


def test_decay_mask_skips_norms_biases_and_gate_parameters():
    params = {"embed": jnp.zeros((4, 3)), "layer": {"q_proj": {"kernel": jnp.zeros((3, 3)), "bias": jnp.zeros(3)},
              "attn_norm": {"scale": jnp.zeros(3)}, "A_log": jnp.zeros(2), "dt_bias": jnp.zeros(2),
              "ccq": {"lam_bias": jnp.zeros((2, 1))}}}
    mask = decay_mask(params)
    assert mask["embed"] and mask["layer"]["q_proj"]["kernel"]
    assert not any([mask["layer"]["q_proj"]["bias"], mask["layer"]["attn_norm"]["scale"], mask["layer"]["A_log"],
                    mask["layer"]["dt_bias"], mask["layer"]["ccq"]["lam_bias"]])


@pytest.mark.parametrize("kw,match", [
    ({"lr": 0.0}, r"optim\.lr: expected a finite value > 0, got 0\.0"),
    ({"lr": float("inf")}, r"optim\.lr: expected a finite value > 0, got inf"),
    ({"min_lr_ratio": 2.0}, r"optim\.min_lr_ratio: expected in \[0, 1\], got 2\.0"),
    ({"warmup_steps": -1}, r"optim\.warmup_steps: expected >= 0, got -1"),
    ({"decay_fraction": 0.0}, r"optim\.decay_fraction: expected in \(0, 1\], got 0\.0"),
    ({"weight_decay": -0.1}, r"optim\.weight_decay: expected a finite value >= 0, got -0\.1"),
    ({"grad_clip": float("nan")}, r"optim\.grad_clip: expected a finite value >= 0, got nan"),
    ({"eps": 0.0}, r"optim\.eps: expected a finite value > 0, got 0\.0"),  # Adam would give 0 / 0 = NaN
    ({"b1": 1.0}, r"optim\.b1/b2: expected in \[0, 1\), got 1\.0, 0\.95"),
    ({"b2": -0.5}, r"optim\.b1/b2: expected in \[0, 1\), got 0\.9, -0\.5"),
    ({"schedule": "cosin"}, r"optim\.schedule: expected Literal\['cosine', 'wsd', 'constant'\], got str 'cosin'"),
])
def test_optim_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        OptimConfig(**kw)
