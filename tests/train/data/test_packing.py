"""Packing keeps every token exactly once, marks document boundaries, and resumes exactly."""

import json

import grain
import numpy as np
import pytest

from train.data.packing import PackIterDataset, document_example

BOS, EOS, PAD, T = 1, 2, 0, 16


def _examples(lengths):
    """Examples of documents whose tokens (10 + 1000 i + j) name their document i."""
    return [document_example(10 + 1000 * i + np.arange(n), bos_id=BOS, eos_id=EOS) for i, n in enumerate(lengths)]


def _pack(examples):
    return PackIterDataset(grain.MapDataset.source(examples).to_iter_dataset(), seq_len=T, pad_id=PAD)


LENGTHS = [5, 0, 40, 13, 14, 1, 16, 2, 33, 7, 3]  # empty, longer than T, ending a row, one pair past a row, ...


def test_document_example_pairs():
    ex = document_example(np.array([7, 8, 9]), bos_id=BOS, eos_id=EOS)
    np.testing.assert_array_equal(ex["inputs"], [BOS, 7, 8, 9])
    np.testing.assert_array_equal(ex["targets"], [7, 8, 9, EOS])
    np.testing.assert_array_equal(ex["loss_mask"], [1, 1, 1, 1])
    no_bos = document_example(np.array([7, 8]), bos_id=None, eos_id=EOS)
    np.testing.assert_array_equal(no_bos["inputs"], [7, 8])
    assert len(document_example(np.array([], int), bos_id=None, eos_id=None)["inputs"]) == 0


def test_every_token_once_and_boundaries_marked():
    examples = _examples(LENGTHS)
    rows = list(_pack(examples))
    total = sum(len(e["inputs"]) for e in examples)
    assert len(rows) == -(-total // T)
    doc, offset = 0, 0  # where the next piece must start
    for r, row in enumerate(rows):
        assert all(row[k].shape == (T,) and row[k].dtype == np.int32 for k in row)
        seg = row["segment_ids"]
        used = seg > 0
        if r < len(rows) - 1:
            assert used.all(), "only the last row may be padded"
        assert not np.any(np.diff(used.astype(int)) > 0), "padding only at the end of a row"
        assert (row["input_ids"][~used] == PAD).all() and (row["loss_mask"][~used] == 0).all()
        ids = seg[used]
        assert ids[0] == 1 and set(np.diff(ids)) <= {0, 1}
        for s in np.unique(ids):
            (where,) = np.nonzero(seg == s)
            np.testing.assert_array_equal(row["positions"][where], np.arange(len(where)))
            while len(examples[doc]["inputs"]) == 0:
                doc += 1
            ex = examples[doc]
            piece = slice(offset, offset + len(where))
            assert piece.stop <= len(ex["inputs"]), "a segment crossed a document boundary"
            for key, name in (("input_ids", "inputs"), ("targets", "targets"), ("loss_mask", "loss_mask")):
                np.testing.assert_array_equal(row[key][where], ex[name][piece])
            # Targets stay inside the document: the next input of the piece, or the document's next token.
            np.testing.assert_array_equal(row["targets"][where][:-1], row["input_ids"][where][1:])
            offset = piece.stop
            if offset == len(ex["inputs"]):
                assert row["targets"][where][-1] == EOS
                doc, offset = doc + 1, 0
    assert doc == len(examples) and offset == 0, "every token packed exactly once"


def test_resume_from_every_row_through_json():
    examples = _examples(LENGTHS)
    reference = list(_pack(examples))
    for k in range(len(reference) + 1):
        it = iter(_pack(examples))
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(it.get_state()))
        restored = iter(_pack(examples))
        restored.set_state(state)
        rest = list(restored)
        assert len(rest) == len(reference) - k
        for a, b in zip(rest, reference[k:]):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])


def test_bad_state_is_rejected():
    it = iter(_pack(_examples([3])))
    with pytest.raises(ValueError, match="points past the end"):
        it.set_state({"parent": {"next_index": 1}, "offset": 2})
