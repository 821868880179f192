"""benchmarks/fla_train.py (fla's training step, GPU only): what it refuses before building anything, by name."""

import importlib.util

import pytest

from benchmarks.fla_train import main


@pytest.mark.parametrize("argv, message", [
    (["--presets", "ccq-gdn-1.3b"], "--presets: fla has no CCQ; time the backbone 'gdn-1.3b', not 'ccq-gdn-1.3b'"),
    (["--presets", "gdn-9b"], "--presets: name: unknown value 'gdn-9b'"),
    (["--presets", "gdn2-1.3b"], "--presets: config: fla has no model for GatedDeltaNet2Config"),
    (["--presets", "gdn-1.3b", "--steps", "0"], "--steps: expected >= 1, got 0"),
])
def test_bad_arguments_are_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="this Python has torch")
def test_without_torch_it_says_so(capsys):
    with pytest.raises(SystemExit):
        main(["--presets", "gdn-hybrid-1.3b"])
    assert "error: needs torch and fla (flash-linear-attention) installed" in capsys.readouterr().err
