"""A workdir resumes only the run that wrote it: another seed, model, data or schedule is refused by name, while
settings of how the run is executed (call length, logging, mesh, prefetch) may change."""

import pytest

from tests.train.tiny_run import tiny_config
from train.checkpoint import resume_conflicts
from train.loop import train


def test_conflicts_name_each_setting_that_changes_what_is_computed():
    saved = tiny_config().to_dict()
    same_math = tiny_config(steps_per_call=3, log_every=5, data={"prefetch_batches": 4, "read_threads": 2},
                            mesh={"data": 1}).to_dict()
    assert resume_conflicts(saved, same_math) == []
    other = tiny_config(seed=1, steps=9, optim={"lr": 1e-3}, data={"seed": 3},
                        model_overrides={"num_hidden_layers": 2, "hidden_size": 32}).to_dict()
    assert resume_conflicts(saved, other) == ["data.seed: 0 -> 3", "model_overrides.num_hidden_layers: 1 -> 2",
                                              "optim.lr: 0.003 -> 0.001", "seed: 0 -> 1", "steps: 8 -> 9"]


def test_a_run_saved_with_the_flat_kernel_keys_resumes_under_the_kernel_policy():
    current = tiny_config(model_overrides={"kernel.impl": "chunk", "kernel.chunk_size": 16}).to_dict()
    saved = {**current, "model_overrides": {"attn_impl": "chunk", "chunk_size": 16}}  # written before the policy
    assert resume_conflicts(saved, current) == []
    saved["model_overrides"]["chunk_size"] = 32
    assert resume_conflicts(saved, current) == ["model_overrides.kernel.chunk_size: 32 -> 16"]


def test_a_workdir_with_another_runs_checkpoint_is_refused_before_training(tmp_path):
    first = tiny_config(steps=2, checkpoint_every=0, eval_batches=0)
    train(first, tmp_path, progress=False)
    assert train(first, tmp_path, progress=False)["steps"] == 2  # its own config resumes (nothing left to do)
    with pytest.raises(ValueError, match=r"workdir: .* holds a checkpoint of a run with other settings "
                                         r"\(seed: 0 -> 1\); resume it with its own config"):
        train(tiny_config(steps=2, checkpoint_every=0, eval_batches=0, seed=1), tmp_path, progress=False)
