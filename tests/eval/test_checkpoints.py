"""`ccq_jax.checkpoints`: a real `train.loop.train` checkpoint loads (parameters only) with its tokenizer,
presets grow their vocabulary to the tokenizer's, and the fla hook calls `ccq_jax.convert` when it exists."""

import json
import sys
import types

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from ccq_jax.checkpoints import checkpoint_step_dir, load_checkpoint, load_checkpoint_model, load_fla, random_model
from ccq_jax.tokenizers import ByteTokenizer
from eval.__main__ import main
from eval.builtin_text import ESSAY
from tests.train.tiny_run import tiny_config
from train.loop import train


def _flat(tree) -> dict:
    """{"layers/0/attn/q_proj/kernel": array as a tuple of floats} (comparable with ==)."""
    return {"/".join(str(getattr(k, "key", k)) for k in path): tuple(np.asarray(v).ravel().tolist())
            for path, v in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two steps of a 1-layer GLA on byte-level text (the model's vocabulary grows to the tokenizer's 384): its
    workdir, trained once for the module (tests that change it work on a copy)."""
    root = tmp_path_factory.mktemp("trained")
    (root / "text").mkdir()
    for i, part in enumerate(ESSAY.split("\n\n")):
        (root / "text" / f"{i}.txt").write_text(part)
    cfg = tiny_config(data={"source": "text", "paths": (str(root / "text"),)}, steps=2, eval_batches=0)
    train(cfg, root / "work", progress=False)
    return root / "work"


def test_a_trained_checkpoint_loads_and_evaluates(trained, tmp_path, capsys):
    """Parameters, tokenizer, steps, the CLI."""
    workdir = trained
    bundle = load_checkpoint(workdir)
    assert isinstance(bundle.tokenizer, ByteTokenizer)
    assert bundle.info | {"config": None, "tokenizer": None} == {
        "source": "checkpoint", "path": str(workdir / "checkpoints" / "2"), "step": 2, "preset": "gla-tiny",
        "run": "tiny", "config": None, "tokenizer": None}
    cfg = bundle.model.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (384, 32, 1)
    stored = ocp.PyTreeCheckpointer().restore(workdir / "checkpoints" / "2" / "state")["params"]  # everything
    loaded = _flat(nnx.state(bundle.model, nnx.Param).to_pure_dict())
    assert _flat(stored) == {k + "/value": v for k, v in loaded.items()} and len(loaded) == 17

    step_dir = workdir / "checkpoints" / "2"
    assert checkpoint_step_dir(workdir) == checkpoint_step_dir(workdir / "checkpoints") == step_dir
    assert checkpoint_step_dir(step_dir) == checkpoint_step_dir(workdir, 2) == step_dir
    with pytest.raises(ValueError, match=r"step: 5 is not saved .* saved steps: \[2\]"):
        checkpoint_step_dir(workdir, 5)
    with pytest.raises(ValueError, match=r"neither a saved model folder \(no config.json\) nor a ccq-train workdir"):
        checkpoint_step_dir(workdir / "tensorboard")
    with pytest.raises(ValueError, match=r"step: .*/2 is the folder of step 2; got step=5"):
        checkpoint_step_dir(step_dir, 5)
    with pytest.raises(ValueError, match=r"checkpoint: the parameters in .* do not fit model 'gla-tiny' with "
                                         r"overrides .*'hidden_size': 64"):
        load_checkpoint(workdir, overrides={"hidden_size": 64})

    (tmp_path / "doc.jsonl").write_text('{"text": "Four score and seven years ago."}\n')
    main(["ppl", "--checkpoint", str(workdir), "--data", str(tmp_path / "doc.jsonl"), "--window", "16",
          "--out", str(tmp_path / "out"), "--no-progress"])
    record = json.loads((tmp_path / "out" / "ppl.json").read_text())
    assert record["label"] == "tiny@2" and record["model"]["step"] == 2
    assert record["results"]["num_tokens"] == len("Four score and seven years ago.")
    assert 1 < record["results"]["perplexity"] < 384 and "tiny@2: ppl" in capsys.readouterr().out


def test_relative_and_home_paths_load_from_another_working_directory(trained, tmp_path, monkeypatch, capsys):
    """orbax reads no metadata from a relative path (it crashed with "'NoneType' object has no attribute 'tree'"):
    paths are made absolute where they enter, for the loader, ccq-eval --checkpoint and the training workdir."""
    monkeypatch.chdir(trained.parent)
    bundle = load_checkpoint(trained.name)
    assert bundle.info["path"] == str(trained / "checkpoints" / "2") and bundle.info["step"] == 2
    monkeypatch.setenv("HOME", str(trained.parent))
    assert load_checkpoint(f"~/{trained.name}/checkpoints", step=2).info["path"] == bundle.info["path"]

    (tmp_path / "doc.txt").write_text("Four score and seven years ago.")
    monkeypatch.chdir(tmp_path)
    relative = f"../{trained.parent.name}/{trained.name}"
    main(["ppl", "--checkpoint", relative, "--data", "doc.txt", "--window", "16", "--out", "out", "--no-progress"])
    assert json.loads((tmp_path / "out" / "ppl.json").read_text())["model"]["path"] == bundle.info["path"]

    cfg = tiny_config(steps=2, checkpoint_every=0, eval_batches=0)
    assert "final_loss" in train(cfg, "run", progress=False)  # a relative workdir
    monkeypatch.chdir(trained)
    assert "final_loss" not in train(cfg, tmp_path / "run", progress=False)  # found finished from elsewhere
    assert load_checkpoint_model(tmp_path / "run")[1] == tmp_path / "run" / "checkpoints" / "2"


def test_presets_grow_their_vocabulary_and_check_the_tokenizer():
    assert random_model("gla-tiny", overrides={"num_hidden_layers": 1}).model.config.vocab_size == 384
    with pytest.raises(ValueError, match="tokenizer: it has 384 ids but the model's vocabulary has 256"):
        random_model("gla-tiny", overrides={"vocab_size": 256, "num_hidden_layers": 1})


def test_fla_hook(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ccq_jax.convert", None)  # not installed: a clear error
    with pytest.raises(ValueError, match="ccq_jax.convert.load_fla_checkpoint"):
        load_fla(tmp_path)
    model = random_model("gla-tiny", overrides={"num_hidden_layers": 1}).model
    convert = types.SimpleNamespace(load_fla_checkpoint=lambda path: (model.config, model))
    monkeypatch.setitem(sys.modules, "ccq_jax.convert", convert)
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        load_fla(tmp_path)
    bundle = load_fla(tmp_path, tokenizer="byte", overrides={"kernel.impl": "recurrent"})
    assert bundle.model.config.kernel.impl == "recurrent" and bundle.info["source"] == "fla"
