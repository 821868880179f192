"""A run's metrics report MFU with the mixers' work (`ccq_jax.models.flops`) and 6 N beside it, against the peak
the config names (none without one)."""

import pytest

from ccq_jax.models import count_params
from ccq_jax.models.flops import train_flops_per_token
from tests.train.tiny_run import tiny_config
from train.loop import train
from train.metrics import read_metrics


def test_metrics_hold_both_mfus_in_the_ratio_of_their_numerators(tmp_path):
    cfg = tiny_config(steps=2, peak_tflops=1.0, checkpoint_every=0, eval_batches=0)
    train(cfg, tmp_path, progress=False)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    count, n = train_flops_per_token(cfg.model_config, cfg.data.seq_len), count_params(cfg.model_config)
    assert len(rows) == 2 and all(r["mfu"] > 0 for r in rows)
    assert [r["mfu"] / r["mfu_6n"] for r in rows] == pytest.approx([count.total / (6 * n)] * 2)


def test_no_mfu_without_a_known_peak(tmp_path):
    train(tiny_config(steps=2, checkpoint_every=0, eval_batches=0), tmp_path, progress=False)
    assert not any("mfu" in r or "mfu_6n" in r for r in read_metrics(tmp_path / "metrics.jsonl"))
