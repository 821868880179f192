"""Checkpoints verify themselves: each saved step carries a manifest of its files' sizes and CRC-32s; a corrupted or
truncated file is named with its step and the previous kept step (taken with on_damaged_checkpoint="previous") by
`load_checkpoint` and by a resumed run, and a step saved before manifests existed loads unchecked."""

import json
import shutil

import pytest

from ccq_jax.checkpoint_manifest import MANIFEST, DamagedCheckpoint, damage
from ccq_jax.checkpoints import load_checkpoint_model
from tests.train.tiny_run import tiny_config
from train.loop import train
from train.metrics import read_metrics

CFG = dict(steps=4, checkpoint_every=2, eval_batches=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run's workdir holding steps 2 and 4, each with its manifest."""
    workdir = tmp_path_factory.mktemp("saved") / "run"
    train(tiny_config(**CFG), workdir, progress=False)
    return workdir


def _largest(step_dir):
    return max((p for p in (step_dir / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def test_every_saved_step_lists_its_files(saved):
    for step in (2, 4):
        files = json.loads((saved / "checkpoints" / str(step) / MANIFEST).read_text())["files"]
        assert any(name.startswith("state/") for name in files) and "config/metadata" in files
        assert damage(saved / "checkpoints" / str(step)) is None


def test_a_damaged_step_is_named_with_the_previous_one(saved, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(saved, workdir)
    path = _largest(workdir / "checkpoints" / "4")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    name = path.relative_to(workdir / "checkpoints" / "4")
    with pytest.raises(DamagedCheckpoint, match=rf"checkpoint: step 4 in .* is damaged: {name}: corrupted .*; the "
                                                r"previous kept step is 2: .*on_damaged_checkpoint='previous'"):
        load_checkpoint_model(workdir)
    assert load_checkpoint_model(workdir, on_damaged_checkpoint="previous")[1].name == "2"
    with pytest.raises(ValueError, match="on_damaged_checkpoint: unknown value 'skip'"):
        load_checkpoint_model(workdir, on_damaged_checkpoint="skip")

    path.write_bytes(bytes(data[:100]))
    with pytest.raises(DamagedCheckpoint, match=rf"{name}: truncated or extended \(100 bytes"):
        load_checkpoint_model(workdir, step=4)
    (workdir / "checkpoints" / "4" / MANIFEST).unlink()  # as saved before manifests: nothing to check
    assert damage(workdir / "checkpoints" / "4") is None


def test_a_resumed_run_refuses_a_damaged_step_or_takes_the_previous(saved, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(saved, workdir)
    path = _largest(workdir / "checkpoints" / "4")
    path.write_bytes(path.read_bytes()[:-1])
    longer = tiny_config(**{**CFG, "steps": 6})
    with pytest.raises(DamagedCheckpoint, match=r"step 4 in .* is damaged: .* the previous kept step is 2"):
        train(longer, workdir, progress=False)  # a changed step count is refused later; the damage comes first
    resumed = tiny_config(**CFG, on_damaged_checkpoint="previous")
    assert train(resumed, workdir, progress=False)["steps"] == 4
    assert (workdir / "damaged-checkpoints" / "4").is_dir() and damage(workdir / "checkpoints" / "4") is None
    assert [r["step"] for r in read_metrics(workdir / "metrics.jsonl")] == [1, 2, 3, 4]
