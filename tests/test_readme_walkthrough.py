"""The README's "Saving and loading a model" walkthrough, run as written: its shell and Python blocks in order, from
a fresh working directory holding a copy of the README (relative paths throughout), so that the walkthrough cannot
rot. Then the export is checked: fla's config, the tokenizer and the generation config, equal logits."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np

from ccq_jax.checkpoints import load_checkpoint, load_fla

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## Saving and loading a model"


def walkthrough_blocks():
    """(language, code) of each fenced block of the README's walkthrough section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    return re.findall(r"```(bash|python)\n(.*?)```", section, re.S)


def test_the_readme_walkthrough_runs(tmp_path):
    shutil.copy(ROOT / "README.md", tmp_path)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "CCQ_JAX_COMPILATION_CACHE": "off",
           "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    blocks = walkthrough_blocks()
    assert [language for language, _ in blocks] == ["bash", "python", "bash"]
    outputs = []
    for language, code in blocks:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{language} block failed:\n{code}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    assert outputs[1].endswith("\n"), "generate printed nothing"  # 20 steps of training: often spaces
    assert outputs[2].startswith("wrote out/smoke-fla (gla, ")

    fla_dir = tmp_path / "out" / "smoke-fla"
    assert json.loads((fla_dir / "config.json").read_text())["model_type"] == "gla"
    assert json.loads((fla_dir / "generation_config.json").read_text()) == {
        "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258}
    run, exported, saved = (load_checkpoint(tmp_path / "runs" / "smoke"), load_fla(fla_dir),
                            load_checkpoint(tmp_path / "out" / "smoke"))
    ids = run.tokenizer.encode("The ops")[None]
    logits = np.asarray(run.model(ids))
    np.testing.assert_array_equal(np.asarray(saved.model(ids)), logits)
    np.testing.assert_allclose(np.asarray(exported.model(ids)), logits, rtol=1e-6, atol=1e-6)
    assert exported.tokenizer.spec == saved.tokenizer.spec == run.tokenizer.spec
