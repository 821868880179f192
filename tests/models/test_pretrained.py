"""`CausalLM.save_pretrained` / `from_pretrained` and `ccq-convert export`: exact round trips, a training run read by
the same loader, relative paths from another working directory, the fla export read back by the fla import with
its tokenizer, and bad input named."""

import json

import numpy as np
import pytest

from ccq_jax.checkpoints import load_checkpoint, load_checkpoint_model, load_fla
from ccq_jax.convert import load_fla_checkpoint
from ccq_jax.convert.cli import convert_main
from ccq_jax.models import CausalLM
from ccq_jax.tokenizers import ByteTokenizer, HFTokenizer, load_tokenizer
from tests.builders import assert_same_params, random_model, token_ids
from tests.train.tiny_run import tiny_config
from train.loop import train

TEXT = "the cat sat on the mat"


def _word_tokenizer(path):
    """A tokenizer.json whose special tokens have names no default list knows (they must travel with the export)."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {w: i for i, w in enumerate(["[UNK]", "[START]", "[END]", *sorted(set(TEXT.split()))])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    tok.save(str(path))
    return HFTokenizer(str(path), bos_token="[START]", eos_token="[END]")


def _logits(model, ids):
    return np.asarray(model(ids))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pretrained") / "run"
    train(tiny_config(steps=4, checkpoint_every=2, eval_batches=0), workdir, progress=False)
    return workdir


def test_save_then_from_pretrained_is_exact(tmp_path):
    model = random_model("ccq-gla-tiny", param_dtype="bfloat16", **{"kernel.chunk_size": 16})
    model.save_pretrained(tmp_path / "saved", tokenizer=ByteTokenizer())
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]
    back = CausalLM.from_pretrained(tmp_path / "saved")
    assert back.config == model.config
    assert_same_params(back, model)
    ids = token_ids((2, 24))
    np.testing.assert_array_equal(_logits(back, ids), _logits(model, ids))
    assert isinstance(load_tokenizer(str(tmp_path / "saved")), ByteTokenizer)
    recurrent = CausalLM.from_pretrained(tmp_path / "saved", **{"kernel.impl": "recurrent"})
    assert recurrent.config.kernel.impl == "recurrent"
    with pytest.raises(ValueError, match="attn_impl: renamed to kernel.impl"):
        CausalLM.from_pretrained(tmp_path / "saved", attn_impl="recurrent")
    # a config.json of before the kernel policy (flat attn_impl, chunk_size, ...) reads as the same config
    config_file = tmp_path / "saved" / "config.json"
    saved = json.loads(config_file.read_text())
    flat = {f"{'attn_' if k == 'impl' else ''}{k}": v for k, v in saved.pop("kernel").items()
            if k != "axes"}  # the ops' mesh axes came with the policy: no flat config has them
    config_file.write_text(json.dumps({**saved, **flat}))
    assert CausalLM.from_pretrained(tmp_path / "saved").config == model.config
    # a native folder of before 2026-12-06 (`ccq-convert from-fla` named its weights params.safetensors) still loads
    (tmp_path / "saved" / "model.safetensors").rename(tmp_path / "saved" / "params.safetensors")
    assert_same_params(CausalLM.from_pretrained(tmp_path / "saved"), model)


def test_a_training_run_loads_from_another_working_directory(run, tmp_path, monkeypatch):
    expected, step_dir, _ = load_checkpoint_model(run)
    assert step_dir.name == "4"
    monkeypatch.chdir(run.parent)
    latest = CausalLM.from_pretrained("run")
    assert_same_params(latest, expected)
    earlier, ids = CausalLM.from_pretrained("run/checkpoints", step=2), token_ids((1, 8), vocab=64)
    assert not np.array_equal(_logits(earlier, ids), _logits(latest, ids))
    monkeypatch.chdir(tmp_path)
    latest.save_pretrained("saved")  # relative on the way out too
    assert_same_params(CausalLM.from_pretrained("./saved"), expected)


def test_export_fla_reads_back_through_the_fla_import_with_its_tokenizer(tmp_path):
    tok = _word_tokenizer(tmp_path / "tokenizer.json")
    model = random_model("gla-tiny", vocab_size=64)
    model.save_pretrained(tmp_path / "saved", tokenizer=tok)
    assert convert_main(["export", str(tmp_path / "saved"), str(tmp_path / "fla"), "--format", "fla"]) == 0
    assert json.loads((tmp_path / "fla" / "generation_config.json").read_text()) == {
        "bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}
    _, imported = load_fla_checkpoint(tmp_path / "fla")
    ids = token_ids((2, 16), vocab=64)
    np.testing.assert_array_equal(_logits(imported, ids), _logits(model, ids))
    exported = load_fla(tmp_path / "fla").tokenizer  # no bos/eos names given: they come from the export
    assert (exported.bos_id, exported.eos_id, exported.pad_id) == (tok.bos_id, tok.eos_id, tok.pad_id)
    np.testing.assert_array_equal(exported.encode(TEXT), tok.encode(TEXT))
    assert exported.decode(tok.encode(TEXT)) == tok.decode(tok.encode(TEXT)) == TEXT
    assert convert_main(["export", str(tmp_path / "saved"), str(tmp_path / "native"), "--format", "native"]) == 0
    assert_same_params(CausalLM.from_pretrained(tmp_path / "native"), model)
    assert load_checkpoint(tmp_path / "native").tokenizer.spec["sha256"] == tok.spec["sha256"]


def test_bad_input_is_named(run, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"checkpoint: .*empty is neither a saved model folder \(no config.json\) "
                                         r"nor a ccq-train workdir"):
        CausalLM.from_pretrained(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"step: 3 is not saved in .*checkpoints; saved steps: \[2, 4\]"):
        CausalLM.from_pretrained(run, step=3)
    random_model("gla-tiny").save_pretrained(tmp_path / "saved")
    with pytest.raises(ValueError, match=r"step: .*saved is a saved model folder .* not a ccq-train run; got step=2"):
        CausalLM.from_pretrained(tmp_path / "saved", step=2)
    with pytest.raises(ValueError, match=r"tokenizer: .*saved has no tokenizer.json \(nor a saved tokenizer\)"):
        load_checkpoint(tmp_path / "saved")
    convert_main(["to-fla", str(tmp_path / "saved"), str(tmp_path / "fla")])
    with pytest.raises(ValueError, match=r"path: .*fla is an fla / Hugging Face model folder .*model_type 'gla'.*"
                                         r"load_fla_checkpoint"):
        CausalLM.from_pretrained(tmp_path / "fla")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        convert_main(["export", str(run), str(tmp_path / "out"), "--step", "3"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ccq-convert: error: step: 3 is not saved in ") and err.count("\n") == 1
