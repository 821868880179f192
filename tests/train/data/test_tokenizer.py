"""The byte tokenizer and tokenizer.json loading (a tiny byte-level BPE trained here)."""

import json
import sys

import numpy as np
import pytest

from train.data import ByteTokenizer, HFTokenizer, load_tokenizer, round_vocab_size

TEXT = "Grüße, 世界! tabs\tand\nnewlines 🙂"


def test_byte_tokenizer_round_trip_and_specials():
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert ids.dtype == np.int32 and ids.max() < 256
    assert len(ids) == len(TEXT.encode("utf-8"))
    assert tok.decode(ids) == TEXT
    assert tok.decode(np.concatenate([[tok.bos_id], ids, [tok.eos_id, tok.pad_id]])) == TEXT
    assert {tok.bos_id, tok.eos_id, tok.pad_id} == {256, 257, 258}
    assert tok.vocab_size == 384 == round_vocab_size(259) and round_vocab_size(256) == 256
    assert isinstance(load_tokenizer(), ByteTokenizer)


def _train_bpe(path, specials=("<s>", "</s>", "<pad>")):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=list(specials), initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TEXT, "hello world, hello there"] * 20, trainer)
    tok.save(str(path))
    return tok


def test_tokenizer_json_round_trip_and_special_ids(tmp_path):
    raw = _train_bpe(tmp_path / "tokenizer.json")
    tok = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert isinstance(tok, HFTokenizer)
    ids = tok.encode(TEXT)
    assert ids.dtype == np.int32 and len(ids) < len(TEXT.encode("utf-8"))  # merges were learned
    assert tok.decode(ids) == TEXT
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == tuple(raw.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    assert tok.vocab_size == raw.get_vocab_size() and tok.spec["sha256"]


@pytest.mark.parametrize("kind", ["byte", "hf"])
def test_encode_batch_equals_encode_of_each_text(tmp_path, kind):
    if kind == "hf":
        _train_bpe(tmp_path / "tokenizer.json")
    tok = load_tokenizer("byte" if kind == "byte" else str(tmp_path / "tokenizer.json"))
    texts = [TEXT, "", "hello world, hello there", "ünïcödé " * 30]
    batch = tok.encode_batch(texts)
    assert len(batch) == len(texts)
    for ids, text in zip(batch, texts):
        assert ids.dtype == np.int32
        np.testing.assert_array_equal(ids, tok.encode(text))


def test_tokenizer_config_json_and_explicit_tokens_take_precedence(tmp_path):
    raw = _train_bpe(tmp_path / "tokenizer.json", specials=("<s>", "</s>", "<|eot|>"))
    path = str(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|eot|>"}}))
    tok = HFTokenizer(path)
    assert tok.eos_id == raw.token_to_id("<|eot|>") and tok.pad_id == tok.eos_id
    assert HFTokenizer(path, eos_token="</s>", bos_token=None).eos_id == raw.token_to_id("</s>")


def test_tokenizer_errors_name_the_field(tmp_path):
    _train_bpe(tmp_path / "tokenizer.json", specials=("<unk>",))
    path = str(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match="eos_token: no end-of-document token found"):
        HFTokenizer(path)
    with pytest.raises(ValueError, match=r"bos_token: token '<bos>' is not in the vocabulary"):
        HFTokenizer(path, bos_token="<bos>", eos_token="<unk>")
    with pytest.raises(ValueError, match="tokenizer: 'missing.json' is neither 'byte' nor an existing"):
        load_tokenizer("missing.json")


def test_tokenizer_json_without_the_package_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"tokenizer: reading a tokenizer.json needs `pip install tokenizers`"):
        HFTokenizer(str(tmp_path / "tokenizer.json"))


def test_a_tokenizer_json_that_does_not_parse_is_named(tmp_path):
    """The tokenizers library's bare `Exception: key must be a string at line 1 column 2` named no file."""
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer: '.*tokenizer\.json' is not a tokenizer\.json the tokenizers "
                                         r"library can read \(key must be a string"):
        load_tokenizer(str(tmp_path / "tokenizer.json"))
