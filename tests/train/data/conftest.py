"""Tiny corpora written into tmp_path and helpers to read documents back out of packed batches."""

import json

import numpy as np
import pytest

from train.data import ByteTokenizer

BOS, EOS = ByteTokenizer.bos_id, ByteTokenizer.eos_id


def make_documents(count, seed=0):
    """`count` distinct documents of varied length (some empty, some longer than the test seq_len)."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "délta", "ε", "zeta", "eta", "θ"]
    docs = []
    for i in range(count):
        n = int(rng.integers(0, 40)) if i % 7 else 60
        docs.append(f"doc{i}: " + " ".join(rng.choice(words, n)))
    docs[3] = ""  # an empty document is still one (BOS, EOS) pair
    return docs


@pytest.fixture
def documents():
    return make_documents(23)


@pytest.fixture
def jsonl_corpus(tmp_path, documents):
    """The documents in two jsonl files (field "body"), returned as the directory."""
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for part, chunk in enumerate((documents[:10], documents[10:])):
        lines = [json.dumps({"id": i, "body": d}) for i, d in enumerate(chunk)]
        (folder / f"part{part}.jsonl").write_text("\n".join(lines) + "\n\n")
    return folder


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def documents_in(batches):
    """Texts of the byte-tokenised documents in a stream of batches, in stream order.

    The scored inputs, concatenated over rows, are [BOS] text for each document; splitting
    at BOS recovers the texts (a document split across rows is joined back).
    """
    stream = np.concatenate([b["input_ids"][b["loss_mask"] == 1] for b in batches])
    starts = np.flatnonzero(stream == BOS)
    assert len(starts) and starts[0] == 0
    pieces = np.split(stream, starts[1:])
    return [bytes(p[1:].astype(np.uint8)).decode("utf-8") for p in pieces]
