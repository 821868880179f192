"""What a run says at its ends: the held-out evaluation logged as `eval/...` scalars at the last step (metrics.jsonl
and TensorBoard, once also after a resume of a finished run), its accuracy named for what it is on text; a
non-finite first step after a resume names the checkpoint it came from; a disk too full for the checkpoints is
found before anything compiles."""

import collections
import shutil

import jax
import jax.numpy as jnp
import pytest

from benchmarks.tools.compilation import CompileCounter
from tests.train.tiny_run import tiny_config
from train.checkpoint import Checkpointer
from train.loop import NonFiniteLoss, check_free_space, train
from train.metrics import read_metrics

Usage = collections.namedtuple("Usage", "total used free")


def _tensorboard_bytes(workdir) -> bytes:
    return b"".join(p.read_bytes() for p in (workdir / "tensorboard").iterdir())


def test_the_evaluation_is_logged_at_the_last_step_once(tmp_path):
    cfg = tiny_config(steps=4, checkpoint_every=0, eval_batches=1)
    summary = train(cfg, tmp_path, progress=False)
    rows = read_metrics(tmp_path / "metrics.jsonl", rows="all")
    assert read_metrics(tmp_path / "metrics.jsonl", rows="eval") == rows[-1:]
    assert rows[-1] == {"step": 4, "eval/loss": summary["eval_loss"], "eval/recall": summary["eval_recall"]}
    assert rows[-2]["step"] == 4 and "recall" in rows[-2]  # the last training step's row, MQAR's recall
    assert b"eval/loss" in _tensorboard_bytes(tmp_path) and b"eval/recall" in _tensorboard_bytes(tmp_path)
    train(cfg, tmp_path, progress=False)  # a finished run, run again, evaluates again: still one evaluation row
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl", rows="eval")] == [4]


def test_on_text_the_accuracy_is_next_token_accuracy(tmp_path):
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    cfg = tiny_config(steps=2, checkpoint_every=0, eval_batches=1,
                      data={"source": "text", "paths": (str(tmp_path / "corpus.txt"),), "seq_len": 32})
    summary = train(cfg, tmp_path / "run", progress=False)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl", rows="all")
    assert "eval_recall" not in summary and 0 <= summary["eval_next_token_accuracy"] <= 1
    assert rows[-1]["eval/next_token_accuracy"] == summary["eval_next_token_accuracy"]
    assert "next_token_accuracy" in rows[0] and not any("recall" in key for r in rows for key in r)


def test_a_non_finite_first_step_after_a_resume_names_the_checkpoint(tmp_path, monkeypatch):
    cfg = tiny_config(steps=6, checkpoint_every=2, eval_batches=0)
    save = Checkpointer.save

    def stopped_after_step_4(self, step, *args, **kwargs):
        save(self, step, *args, **kwargs)
        if step == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpointer, "save", stopped_after_step_4)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path, progress=False)
    restore = Checkpointer.restore
    poisoned = lambda self, *args: jax.tree.map(lambda x: x * jnp.nan if jnp.issubdtype(x.dtype, jnp.floating) else x,
                                                restore(self, *args))  # bytes that pass the manifest yet are NaN
    monkeypatch.setattr(Checkpointer, "restore", poisoned)
    monkeypatch.setattr(Checkpointer, "save", save)
    directory = tmp_path / "checkpoints"
    with pytest.raises(NonFiniteLoss) as err:
        train(cfg, tmp_path, progress=False)
    assert str(err.value) == (
        f"step 4: loss or gradient norm is not finite (loss=nan), the first step after resuming from checkpoint step "
        f"4 in {directory}; that checkpoint may be damaged: move {directory / '4'} out of {directory} (e.g. to "
        f"{tmp_path / 'damaged-checkpoints'}) to resume from step 2, the previous kept one")


def test_a_disk_too_full_for_the_checkpoints_is_found_before_compiling(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(2**40, 2**40 - 2**20, 2**20))  # 1 MiB free
    cfg = tiny_config(steps=2, checkpoint_every=0, eval_batches=0, keep_checkpoints=3,
                      model_overrides={"num_hidden_layers": 2, "hidden_size": 256})
    with CompileCounter() as compiles, pytest.raises(ValueError) as err:
        train(cfg, tmp_path, progress=False)
    assert compiles.seconds == []
    message = str(err.value)
    assert message.startswith(f"workdir: {tmp_path} has 0.00 GiB free; keep_checkpoints=3 checkpoints of ")
    assert "lower keep_checkpoints or use another workdir" in message and not (tmp_path / "checkpoints" / "2").exists()


def test_checkpoints_already_there_count_as_room(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(2**30, 2**30 - 100, 100))
    with pytest.raises(ValueError, match=r"has 0.00 GiB free; keep_checkpoints=2 checkpoints of 0.00 GiB each"):
        check_free_space(tmp_path, 1000, 2)
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    (tmp_path / "checkpoints" / "4" / "state").write_bytes(b"x" * 1900)
    check_free_space(tmp_path, 1000, 2)  # 2000 bytes needed, 1900 held and 100 free
