"""The parity metrics, and the command-line tools on the goldens (the PyTorch side itself: test_live.py)."""

import json
import re

import numpy as np
import pytest

from ccq_jax.convert import load_fla_checkpoint, parity
from ccq_jax.convert.cli import convert_main, parity_main
from ccq_jax.models.files import read_state_dict
from ccq_jax.convert.parity import logit_metrics
from tests.builders import assert_same_params, FIXTURES


@pytest.mark.parametrize("dtype,tf32,ieee,highest", [("float32", False, True, True), ("float32", True, False, False),
                                                     ("bfloat16", False, False, False)])
def test_fp32_parity_asks_both_sides_for_ieee_fp32(dtype, tf32, ieee, highest, monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, capture_output, text, env):  # the PyTorch side, as the child process would answer
        seen.update(cmd=cmd, env=env)
        np.save(cmd[cmd.index("--out") + 1], np.zeros((1, 2, 3), np.float32))
        return type("Done", (), {"returncode": 0, "stdout": '{"device": "cuda"}\n', "stderr": ""})()

    monkeypatch.setattr(parity.subprocess, "run", fake_run)
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    logits, info = parity.torch_logits(tmp_path, np.zeros((1, 2)), device="cuda", dtype=dtype, tf32=tf32)
    assert logits.shape == (1, 2, 3) and info == {"device": "cuda"}
    assert (seen["env"].get("TRITON_F32_DEFAULT") == "ieee") == ieee and ("--tf32" in seen["cmd"]) == tf32
    assert (parity.matmul_precision(dtype, tf32) == "highest") == highest


def test_a_failing_pytorch_side_reports_its_stderr(monkeypatch, tmp_path):
    failed = type("Done", (), {"returncode": 1, "stdout": "", "stderr": "ModuleNotFoundError: No module named 'fla'"})
    monkeypatch.setattr(parity.subprocess, "run", lambda cmd, capture_output, text, env: failed())
    with pytest.raises(RuntimeError, match=r"(?s)the PyTorch side failed \(.*torch_reference logits .*\):\n"
                                           r"ModuleNotFoundError: No module named 'fla'"):
        parity.torch_logits(tmp_path, np.zeros((1, 2)), python="python-with-torch")


def test_logit_metrics():
    ref = np.array([[[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]]])
    same = logit_metrics(ref, ref)
    assert same == {"max_abs_diff": 0.0, "mean_abs_diff": 0.0, "rel_rms": 0.0, "kl": 0.0, "top1_agreement": 1.0}
    shifted = logit_metrics(ref + 0.5, ref)  # a constant per token changes no probability
    assert shifted["max_abs_diff"] == pytest.approx(0.5) and shifted["kl"] == pytest.approx(0.0, abs=1e-15)
    flipped = ref.copy()
    flipped[0, 1] = [0.0, 2.0, 0.0]
    m = logit_metrics(flipped, ref)
    assert m["top1_agreement"] == 0.5 and m["max_abs_diff"] == 2.0 and m["mean_abs_diff"] == pytest.approx(4 / 6)
    p = np.exp(ref[0, 1]) / np.exp(ref[0, 1]).sum()
    q = np.exp(flipped[0, 1]) / np.exp(flipped[0, 1]).sum()
    assert m["kl"] == pytest.approx((p * np.log(p / q)).sum() / 2)
    with pytest.raises(ValueError, match=re.escape("logits: shapes differ, ours (1, 2, 3) vs reference (2, 3)")):
        logit_metrics(ref, ref[0])


def test_ccq_convert_both_ways_is_exact(tmp_path, capsys):
    convert_main(["from-fla", str(FIXTURES / "ccq-gdn"), str(tmp_path / "jax"), "--set", "kernel.chunk_size=16"])
    assert json.loads((tmp_path / "jax" / "config.json").read_text())["kernel"]["chunk_size"] == 16
    convert_main(["to-fla", str(tmp_path / "jax"), str(tmp_path / "fla"), "--max-shard-gb", "0.00005"])
    assert "wrote" in capsys.readouterr().out
    original, back = read_state_dict(FIXTURES / "ccq-gdn"), read_state_dict(tmp_path / "fla")
    assert sorted(back) == sorted(original)
    for name in original:
        np.testing.assert_array_equal(back[name], original[name], strict=True)
    assert_same_params(load_fla_checkpoint(tmp_path / "fla")[1], load_fla_checkpoint(FIXTURES / "ccq-gdn")[1])


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        convert_main(["from-fla", str(tmp_path), str(tmp_path / "out")])
    assert exit.value.code == 2
    assert capsys.readouterr().err == f"ccq-convert: error: {tmp_path / 'config.json'}: not found\n"
    with pytest.raises(SystemExit, match=re.escape("ccq-parity: name: unknown value 'gla-13b'")):
        parity_main(["--preset", "gla-13b"])
