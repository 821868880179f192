"""ccq-train trains a KDA preset (CCQ on): a few steps of the tiny run, finite losses (GDN-2 shares its code path
through `CausalLM`; tests/models/test_delta_family.py differentiates both)."""

import json

import numpy as np
import pytest

from tests.train.tiny_run import tiny_config
from train.loop import train


@pytest.mark.parametrize("model", ["ccq-kda-tiny"])
def test_a_few_training_steps(model, tmp_path):
    summary = train(tiny_config(model=model, steps=4, checkpoint_every=0), tmp_path, progress=False)
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert summary["steps"] == 4 and len(losses) >= 4 and np.isfinite(losses).all()
