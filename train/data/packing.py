"""Packing of variable-length examples into rows of `seq_len`, with a checkpointable state.

An *example* is a dict of equal-length int32 arrays `inputs`, `targets`, `loss_mask`
(`document_example` makes one from a tokenised document). Packing concatenates examples and
cuts the stream every `seq_len` positions, so nothing is padded except the very last row of a
finite stream; an example longer than the room left in a row continues in the next row(s).

Because inputs and targets are packed as *pairs*, a target is always the next token of the
same document: packing never creates a pair that crosses a document boundary, and a
document split across two rows loses no pair (its continuation starts a new segment).

A packed row has int32 [seq_len] arrays:
- `input_ids`, `targets`: token ids (pad_id where padded);
- `segment_ids`: 1, 2, ... for the pieces of examples in the row, 0 for padding;
- `positions`: the position within the piece, restarting at 0 with every segment (the
  recurrent state restarts there too, since ccq_jax.ops resets at every change of id);
- `loss_mask`: 1 where the target is scored, 0 on padding (and on unscored synthetic tokens).

The iterator's state (`get_state`) is the parent's state before the example in progress plus
the offset into it: small, JSON-able, and exact, so a restored iterator continues with the
very rows the uninterrupted one would have produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

EXAMPLE_KEYS = ("inputs", "targets", "loss_mask")
_ROW_FROM_EXAMPLE = dict(zip(("input_ids", "targets", "loss_mask"), EXAMPLE_KEYS))  # row key <- example key
ROW_KEYS = ("input_ids", "targets", "segment_ids", "positions", "loss_mask")


def document_example(tokens: np.ndarray, *, bos_id: int | None, eos_id: int | None) -> dict[str, np.ndarray]:
    """Next-token pairs of one document: `[bos] tokens [eos]` -> inputs = seq[:-1], targets = seq[1:].

    Every token of `[bos] tokens` is an input exactly once, every token of `tokens [eos]` a
    target exactly once; all pairs are scored.
    """
    parts = [np.asarray(tokens, np.int32).reshape(-1)]
    if bos_id is not None:
        parts.insert(0, np.array([bos_id], np.int32))
    if eos_id is not None:
        parts.append(np.array([eos_id], np.int32))
    seq = np.concatenate(parts)
    n = max(len(seq) - 1, 0)
    return {"inputs": seq[:n], "targets": seq[1 : n + 1], "loss_mask": np.ones(n, np.int32)}


def padding_rows(count: int, seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
    """`count` rows of padding: token ids `pad_id`, segment 0, nothing scored."""
    rows = {key: np.zeros((count, seq_len), np.int32) for key in ROW_KEYS}
    rows["input_ids"][:] = pad_id
    rows["targets"][:] = pad_id
    return rows


def stack_rows(rows: Sequence[dict[str, np.ndarray]], *, batch_size: int, pad_id: int) -> dict[str, np.ndarray]:
    """Stack rows into a [batch_size, seq_len] batch, padding with empty rows (end of a finite stream)."""
    batch = {key: np.stack([row[key] for row in rows]) for key in ROW_KEYS}
    missing = batch_size - len(rows)
    if missing:
        pad = padding_rows(missing, batch["input_ids"].shape[1], pad_id)
        batch = {key: np.concatenate([batch[key], pad[key]]) for key in ROW_KEYS}
    return batch


class _PackIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, seq_len: int, pad_id: int):
        super().__init__(parent)
        self._seq_len = seq_len
        self._pad_id = pad_id
        self._example: dict[str, np.ndarray] | None = None
        self._example_parent_state: dict[str, Any] | None = None
        self._offset = 0

    def _next_example(self) -> bool:
        """Load the next non-empty example; False at the end of the stream."""
        while True:
            state = self._parent.get_state()
            try:
                example = next(self._parent)
            except StopIteration:
                return False
            if len(example["inputs"]):
                self._example, self._example_parent_state, self._offset = example, state, 0
                return True

    def __next__(self) -> dict[str, np.ndarray]:
        row = {key: value[0] for key, value in padding_rows(1, self._seq_len, self._pad_id).items()}
        filled, segment = 0, 0
        while filled < self._seq_len:
            if self._example is None and not self._next_example():
                break
            example, start = self._example, self._offset
            n = min(self._seq_len - filled, len(example["inputs"]) - start)
            segment += 1
            span = slice(filled, filled + n)
            for row_key, example_key in _ROW_FROM_EXAMPLE.items():
                row[row_key][span] = example[example_key][start : start + n]
            row["segment_ids"][span] = segment
            row["positions"][span] = np.arange(n, dtype=np.int32)
            filled += n
            self._offset += n
            if self._offset == len(example["inputs"]):
                self._example = None
        if filled == 0:
            raise StopIteration
        return row

    def get_state(self) -> dict[str, Any]:
        if self._example is None:
            return {"parent": self._parent.get_state(), "offset": 0}
        return {"parent": self._example_parent_state, "offset": self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._example = None
        if state["offset"]:
            if not self._next_example():
                raise ValueError(f"packing state {state} points past the end of its parent dataset")
            self._offset = state["offset"]


class PackIterDataset(grain.IterDataset):
    """Rows of `seq_len` packed from the parent's examples (see the module docstring)."""

    def __init__(self, parent: grain.IterDataset, *, seq_len: int, pad_id: int):
        super().__init__(parent)
        self._seq_len = seq_len
        self._pad_id = pad_id

    def __iter__(self) -> _PackIterator:
        return _PackIterator(self._parent.__iter__(), self._seq_len, self._pad_id)

    def __str__(self) -> str:
        return f"PackIterDataset(seq_len={self._seq_len}, pad_id={self._pad_id})"
