"""ccq-train ends a user error as ccq-eval does: one `ccq-train: error: ...` line on stderr and exit status 2, found
before anything compiles; `--debug` raises the error with its traceback instead."""

import pytest
import yaml

from tests.train.tiny_run import tiny_config
from train.__main__ import main
from train.runs import load_config


@pytest.fixture
def tiny_yaml(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_config(steps=2, checkpoint_every=0, eval_batches=0).to_dict()))
    return path


def _error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("ccq-train: error: "), err
    return err


def test_a_missing_or_malformed_yaml_is_one_error_line(tmp_path, capsys):
    assert f"{tmp_path / 'nowhere.yaml'}: No such file or directory" in _error(
        ["--config", str(tmp_path / "nowhere.yaml")], capsys)
    (tmp_path / "bad.yaml").write_text("steps: [1, 2\noptim: {lr: 1}\n")
    assert "bad.yaml" in _error(["--config", str(tmp_path / "bad.yaml")], capsys)
    with pytest.raises(FileNotFoundError):
        main(["--config", str(tmp_path / "nowhere.yaml"), "--debug"])


def test_an_unwritable_workdir_and_a_bad_mesh_are_found_before_compiling(tiny_yaml, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    message = _error(["--config", str(tiny_yaml), "--workdir", str(tmp_path / "file" / "run")], capsys)
    assert f"workdir: cannot write to {tmp_path / 'file' / 'run'}" in message
    assert "mesh" in _error(["--config", str(tiny_yaml), "--workdir", str(tmp_path / "run"),
                             "--set", "mesh.data=3"], capsys)


def test_a_workdir_of_another_run_is_one_error_line(tiny_yaml, tmp_path, capsys):
    assert main(["--config", str(tiny_yaml), "--workdir", str(tmp_path / "run"), "--no-progress"]) == 0
    capsys.readouterr()
    message = _error(["--config", str(tiny_yaml), "--workdir", str(tmp_path / "run"), "--set", "seed=1"], capsys)
    assert "holds a checkpoint of a run with other settings (seed: 0 -> 1)" in message


def test_an_empty_yaml_or_runs_list_is_refused_not_trained_as_the_defaults(tmp_path, capsys):
    """An empty YAML file gave the defaults, and ccq-train started a long run nobody asked for."""
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    with pytest.raises(ValueError, match=r"empty\.yaml: holds no settings"):
        load_config(str(tmp_path / "empty.yaml"))
    assert "empty.yaml: holds no settings" in _error(["--config", str(tmp_path / "empty.yaml")], capsys)
    (tmp_path / "none.yaml").write_text("runs: []\n")
    with pytest.raises(ValueError, match=r"runs: expected a non-empty list of run configs in .*none\.yaml, got \[\]"):
        load_config(str(tmp_path / "none.yaml"))


def test_on_nan_stop_ends_as_one_error_line_naming_the_step(tiny_yaml, tmp_path, capsys):
    message = _error(["--config", str(tiny_yaml), "--workdir", str(tmp_path / "run"), "--set", "optim.lr=1e30",
                      "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0.0", "--set", "on_nan=stop"], capsys)
    assert "loss or gradient norm is not finite" in message and "step " in message


def test_kernel_overrides_are_dotted_model_keys_and_the_old_flat_ones_name_their_new_key(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("model: gla-tiny\nmodel_overrides: {kernel.impl: pallas, kernel.chunk_size: 16}\n")
    (run,) = load_config(str(path), {"model_overrides.kernel.decode_impl": "pallas", "model.kernel.chunk_size": 32})
    assert run.model_overrides == {"kernel.impl": "pallas", "kernel.chunk_size": 32, "kernel.decode_impl": "pallas"}
    path.write_text("model: gla-tiny\nmodel_overrides: {attn_impl: pallas}\n")
    with pytest.raises(ValueError, match=r"model\.attn_impl: renamed to kernel\.impl"):
        load_config(str(path))
    assert "model.chunk_size: renamed to kernel.chunk_size" in _error(
        ["--config", "smoke", "--set", "model.chunk_size=8"], capsys)
    path.write_text("model: transformer-tiny\n")
    assert "model.attn_impl: renamed to sdpa_impl" in _error(
        ["--config", str(path), "--set", "model_overrides.attn_impl=cudnn"], capsys)
