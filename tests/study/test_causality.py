"""study/lm/causality.py on a tiny random model and a few documents: the prefix logits do not move when the suffix
is replaced, every attention implementation gives the same loss, and a shuffled row scores differently."""

import json
import sys

import numpy as np

from study.lm import causality
from study.tokenizer import train_tokenizer


def test_the_checks_on_a_tiny_model(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    words = ["the", "kernel", "reads", "a", "state", "and", "writes", "keys", "values", "to", "memory"]
    docs = [" ".join(rng.choice(words, 120)) for _ in range(8)]
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    tokenizer = train_tokenizer(docs, tmp_path / "tok", vocab_size=300)
    out = tmp_path / "report.json"
    monkeypatch.setattr(sys, "argv", ["causality", "--preset", "ccq-gdn-tiny", "--data", str(data), "--tokenizer",
                                      str(tokenizer), "--batch", "2", "--length", "96", "--cut", "40",
                                      "--out", str(out)])
    causality.main()
    report = json.loads(out.read_text())
    assert report["prefix_max_abs_change"] == 0.0
    assert report["suffix_max_abs_change"] > 0.0
    for impl in ("chunk", "recurrent"):
        assert abs(report[f"loss_{impl}"] - report["loss_pallas"]) < 1e-2 * report["loss_pallas"]
        assert report[f"logits_rel_rms_{impl if impl != 'recurrent' else 'pallas'}_vs_recurrent"] < 0.02
    assert report["loss_shuffled_rows"] != report["loss_pallas"]
