"""build_pipeline: batch format, determinism, exact resume, per-host sharding, epochs, errors."""

import json

import jax
import numpy as np
import pytest

from train.data import DataConfig, build_pipeline
from train.data.packing import ROW_KEYS

from .conftest import assert_batches_equal, documents_in, take


def _config(corpus, **kw):
    base = dict(source="jsonl", paths=(str(corpus),), text_field="body", seq_len=32, batch_size=4, seed=3)
    return DataConfig(**{**base, **kw})


def _batches(config, n=None, **host):
    it = iter(build_pipeline(config, **{"process_index": 0, "process_count": 1, **host}).dataset)
    try:
        return list(it) if n is None else take(it, n)
    finally:
        it.close()


def test_batch_format(jsonl_corpus):
    pipeline = build_pipeline(_config(jsonl_corpus), process_index=0, process_count=1)
    assert (pipeline.vocab_size, pipeline.local_batch_size, pipeline.seq_len) == (384, 4, 32)
    (batch,) = _batches(_config(jsonl_corpus), 1)
    assert sorted(batch) == ["input_ids", "loss_mask", "positions", "segment_ids", "targets"]
    assert all(v.shape == (4, 32) and v.dtype == np.int32 for v in batch.values())


def test_one_epoch_holds_every_document_once(jsonl_corpus, documents):
    batches = _batches(_config(jsonl_corpus, num_epochs=1))
    got = documents_in(batches)
    assert sorted(got) == sorted(documents) and got != documents  # shuffled
    assert documents_in(_batches(_config(jsonl_corpus, num_epochs=1, shuffle=False))) == documents
    rows = np.concatenate([b["segment_ids"] for b in batches])
    padded = np.flatnonzero((rows == 0).any(axis=1))
    assert len(padded) and (padded == np.arange(len(rows) - len(padded), len(rows))).all(), "padding only at the end"
    ids = np.concatenate([b["input_ids"] for b in batches])
    assert (ids[rows == 0] == 258).all()  # PAD


def test_epochs_are_reshuffled(jsonl_corpus, documents):
    got = documents_in(_batches(_config(jsonl_corpus, num_epochs=2)))
    first, second = got[: len(documents)], got[len(documents) :]
    assert sorted(first) == sorted(second) == sorted(documents) and first != second


def test_same_seed_same_batches_other_seed_differs(jsonl_corpus):
    a = _batches(_config(jsonl_corpus), 6)
    assert_batches_equal(a, _batches(_config(jsonl_corpus, prefetch_batches=0, read_threads=1), 6))
    b = _batches(_config(jsonl_corpus, seed=4), 6)
    assert any(not np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_exact_resume_mid_epoch(jsonl_corpus, prefetch):
    config = _config(jsonl_corpus, prefetch_batches=prefetch)
    reference = _batches(config, 14)  # ~3 epochs of 23 documents
    for k in (1, 5, 9):
        it = iter(build_pipeline(config, process_index=0, process_count=1).dataset)
        take(it, k)
        state = json.loads(json.dumps(it.get_state()))
        it.close()
        restored = iter(build_pipeline(config, process_index=0, process_count=1).dataset)
        restored.set_state(state)
        assert_batches_equal(take(restored, 14 - k), reference[k:])
        restored.close()


def test_hosts_partition_the_documents(jsonl_corpus, documents):
    config = _config(jsonl_corpus, num_epochs=1, batch_size=4)
    per_host = [documents_in(_batches(config, process_index=i, process_count=2)) for i in range(2)]
    assert not set(per_host[0]) & set(per_host[1])
    assert sorted(per_host[0] + per_host[1]) == sorted(documents)
    assert build_pipeline(config, process_index=1, process_count=2).local_batch_size == 2


@pytest.mark.parametrize(
    "source, task", [("mqar", {"vocab_size": 64, "num_kv_pairs": 4}), ("needle", {"vocab_size": 64})]
)
def test_synthetic_sources_make_batches_on_the_device(source, task):
    config = DataConfig.from_dict({"source": source, "seq_len": 32, "batch_size": 2, source: task})
    pipeline = build_pipeline(config, process_index=0, process_count=1)
    assert pipeline.vocab_size == 64 and pipeline.tokenizer is None and pipeline.dataset is None
    batches = [jax.device_get(pipeline.synthetic.batch(step)) for step in range(3)]
    assert_batches_equal(batches, [jax.device_get(pipeline.synthetic.batch(step)) for step in range(3)])
    for batch in batches:  # one example per row, its scored positions intact
        scored = batch.pop("scored_positions")
        assert set(batch) == set(ROW_KEYS) and all(v.shape == (2, 32) for v in batch.values())
        assert scored.shape == (2, 4)  # MQAR's 4 pairs, the needle's 4 value tokens
        assert (batch["segment_ids"] == 1).all() and (batch["loss_mask"].sum(axis=1) == 4).all()
    with pytest.raises(ValueError, match=r"num_epochs: synthetic batches never end .* leave it None, got 1"):
        DataConfig.from_dict({"source": source, "seq_len": 32, "num_epochs": 1, source: task})


def test_host_errors(jsonl_corpus):
    with pytest.raises(ValueError, match="batch_size: the global batch 4 must be divisible by process_count=3"):
        build_pipeline(_config(jsonl_corpus), process_index=0, process_count=3)
    with pytest.raises(ValueError, match=r"process_index: must be in \[0, process_count=2\), got 2"):
        build_pipeline(_config(jsonl_corpus), process_index=2, process_count=2)
    with pytest.raises(ValueError, match="fewer than process_count=32"):
        build_pipeline(_config(jsonl_corpus, batch_size=32), process_index=0, process_count=32)


def test_process_defaults_come_from_jax(jsonl_corpus):
    pipeline = build_pipeline(_config(jsonl_corpus))
    assert (pipeline.process_index, pipeline.process_count) == (0, 1)
