"""A resumed run logs each step once: the rows a killed run wrote after its last checkpoint are dropped (the file is
rewritten whole), TensorBoard purges its events from there, and the writers are closed however a run ends."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.train.tiny_run import tiny_config
from train.loop import train
from train.metrics import MetricsWriter, keep_rows_through, read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Killed(Exception):
    pass


def test_an_interrupted_and_resumed_run_has_one_row_per_step(tmp_path, monkeypatch):
    cfg = tiny_config(steps=8, checkpoint_every=4, steps_per_call=2, eval_batches=0)
    write = MetricsWriter.write

    def killed_after_step_6(self, step, scalars):
        write(self, step, scalars)
        if step == 6:
            raise Killed

    monkeypatch.setattr(MetricsWriter, "write", killed_after_step_6)
    with pytest.raises(Killed):
        train(cfg, tmp_path, progress=False)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    events = list((tmp_path / "tensorboard").iterdir())
    assert sum(f.stat().st_size for f in events) > 100  # closed on the way out: the events reached the file
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 7, "lo')  # a line cut off by the kill
    monkeypatch.undo()
    train(cfg, tmp_path, progress=False)  # resumes from the checkpoint of step 4
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == list(range(1, 9))


def test_keeping_rows_rewrites_only_a_file_that_changes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    keep_rows_through(path, 3)  # no file: nothing to do
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2, 3)))
    before = path.stat().st_ino
    keep_rows_through(path, 3)
    assert path.stat().st_ino == before
    keep_rows_through(path, 1)
    assert read_metrics(path) == [{"step": 1, "loss": 1.0}] and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_on_nan_stop_ends_with_the_error_not_an_abort(tmp_path):
    """The tensorboardX writer left open ended `on_nan=stop` in SIGABRT (exit 134) after an atexit traceback."""
    changes = {"optim": {"lr": 1e30, "warmup_steps": 0, "grad_clip": 0.0}, "steps": 6, "checkpoint_every": 0}
    out = subprocess.run([sys.executable, "-m", "tests.train.tiny_run", str(tmp_path), json.dumps(changes)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 1 and out.returncode != -signal.SIGABRT, out.stderr[-3000:]
    assert "NonFiniteLoss: step" in out.stderr and "atexit" not in out.stderr and "terminate" not in out.stderr


def test_read_metrics_keeps_training_rows_unless_asked(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 1, "eval/loss": 3.0}\n')
    assert read_metrics(path) == [{"step": 1, "loss": 2.0}]
    assert read_metrics(path, rows="eval") == [{"step": 1, "eval/loss": 3.0}]
    assert len(read_metrics(path, rows="all")) == 2
    with pytest.raises(ValueError, match=r"rows: expected 'train', 'eval' or 'all', got 'evaluation'"):
        read_metrics(path, rows="evaluation")
