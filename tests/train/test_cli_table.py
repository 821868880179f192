"""ccq-train's run selection (`--only`) and its closing table: CCQ against its own backbone, the step recall
was first learned at."""

import os
import subprocess
import sys

import pytest

from train.__main__ import by_model, compare, table
from train.runs import load_config, select_runs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_only_selects_runs_in_the_config_order_and_names_unknown_ones():
    runs = load_config("mqar-tiny")
    assert [r.name for r in select_runs(runs, "ccq-gdn-tiny,gla-tiny")] == ["gla-tiny", "ccq-gdn-tiny"]
    assert select_runs(runs, None) == runs
    with pytest.raises(ValueError, match=r"--only: expected names of this config's runs \['gla-tiny', .*\], "
                                         r"got \['gdn'\]"):
        select_runs(runs, "gdn,gla-tiny")


def test_cli_rejects_an_unknown_run_name():
    out = subprocess.run([sys.executable, "-m", "train", "--config", "mqar-tiny", "--only", "gla"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 2 and "--only: expected names of this config's runs" in out.stderr


def test_only_keeps_a_runs_folder_of_its_own_and_the_closing_table(tmp_path):
    # benchmarks/demo_seeds.py reads <workdir>/<run>/metrics.jsonl also when --only picks a single run
    args = ["--config", "mqar-tiny", "--only", "gdn-tiny", "--workdir", str(tmp_path), "--no-progress"]
    for item in ("steps=2", "optim.warmup_steps=1", "log_every=1", "eval_batches=1", "model.num_hidden_layers=1"):
        args += ["--set", item]
    out = subprocess.run([sys.executable, "-m", "train", *args], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu",
                              "JAX_DISABLE_MOST_OPTIMIZATIONS": "true"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "gdn-tiny" / "metrics.jsonl").is_file() and (tmp_path / "summary.json").is_file()
    assert out.stdout.splitlines()[-3].split()[0] == "gdn-tiny"  # the table's one row


def test_compare_and_table():
    summaries = [{"name": "a", "model": "gla-tiny", "eval_recall": 0.50},
                 {"name": "b", "model": "ccq-gla-tiny", "eval_recall": 0.625},
                 {"name": "c", "model": "ccq-gdn-tiny", "eval_recall": 0.9}]  # no gdn-tiny beside it
    metrics = [[{"step": 25, "recall": 0.5}, {"step": 50, "recall": 0.95}, {"step": 75, "recall": 0.7}],
               [{"step": 25, "recall": 0.2}],
               [{"step": 25}]]  # a task without recall
    a, b, c = compare(summaries, metrics)
    assert (a["recall_90_at"], b["recall_90_at"]) == (50, "never") and "recall_90_at" not in c
    assert "ccq_vs_backbone" not in a and b["ccq_vs_backbone"] == pytest.approx(12.5) and "ccq_vs_backbone" not in c
    assert "eval_recall" in summaries[0] and "recall_90_at" not in summaries[0]  # the inputs stay as they were
    lines = table([a, b, c]).splitlines()
    assert lines[0].split() == ["name", "params", "steps", "final_loss", "eval_loss", "eval_recall",
                                "ccq_vs_backbone", "recall_90_at"]
    assert lines[2].split()[-4:] == ["62.5%", "+12.5", "pts", "never"]


def test_by_model_gives_each_models_seeds_mean_range_and_ccq_difference_on_the_same_seed():
    runs = [("gla-tiny", 0, 0.90), ("gla-tiny", 1, 0.80), ("ccq-gla-tiny", 0, 0.95), ("ccq-gla-tiny", 1, 0.70)]
    summaries = compare([{"name": f"{m}-seed{s}", "model": m, "seed": s, "eval_recall": r} for m, s, r in runs],
                        [[]] * 4)
    assert [s.get("ccq_vs_backbone") for s in summaries] == [None, None, pytest.approx(5.0), pytest.approx(-10.0)]
    lines = by_model(summaries).splitlines()
    assert lines[1].split() == ["gla-tiny", "0,1", "90.0%", "80.0%", "85.0%", "10.0"]
    assert lines[2].split() == ["ccq-gla-tiny", "0,1", "95.0%", "70.0%", "82.5%", "25.0",
                                "-2.5", "pts", "(-10.0", "..", "+5.0),", "within", "the", "spread", "over", "seeds"]
    apart = [dict(s, eval_recall=r) for s, r in zip(summaries, (0.50, 0.51, 0.90, 0.92))]
    assert by_model(compare(apart, [[]] * 4)).splitlines()[2].endswith(
        "+40.5 pts (+40.0 .. +41.0), larger than the spread over seeds")
    assert by_model(summaries[::2]) is None  # one run per model: the per-run table says it all
