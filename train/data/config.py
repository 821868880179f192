"""`DataConfig`: the typed, frozen, self-validating description of one input pipeline.

A config names a source kind and its parameters, the tokenizer, the packing length and the
batch; `build_pipeline` (pipeline.py) turns it into batches. Build it directly or from a dict
(YAML, `--set` overrides) with `DataConfig.from_dict`, which rejects unknown keys with the
closest valid name. Every invalid value raises a `ValueError` that names the field.

Source kinds:
- "text": UTF-8 text files (`paths`: files, directories or globs); `text_split="file"` makes
  one document per file, `"blank_line"` one document per paragraph (runs of non-blank
  lines). `encoding_errors` ("strict", "replace", "ignore") says what bytes that
  are not UTF-8 do in text and jsonl files: fail naming the file, or be replaced or dropped.
- "jsonl": one JSON object per line, the document in `text_field`.
- "parquet": the string column `text_field`.
- "hf": a Hugging Face `datasets` dataset: `hf_dataset` is a local directory (from
  `Dataset.save_to_disk`, or data files) or a hub name already in the local cache;
  `hf_config` and `hf_split` pick the subset and split.
- "array_record": shards written by `ccq-prepare-data` (`paths`: their directories).
- "mqar", "needle": seeded synthetic recall tasks (see `MQARConfig`, `NeedleConfig`), made on
  the device from (seed, step); `shuffle`, `read_threads` and `prefetch_batches` do not apply
  and `num_epochs` must stay None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ccq_jax.configlib import check_choice, check_field_types, from_dict, to_dict
from ccq_jax.documents import ENCODING_ERRORS
from ccq_jax.tokenizers import BYTE_TOKENIZER

SOURCES = ("text", "jsonl", "parquet", "hf", "array_record", "mqar", "needle")
FILE_SOURCES = ("text", "jsonl", "parquet", "array_record")
SYNTHETIC_SOURCES = ("mqar", "needle")  # generated on the device (synthetic.py)
NEEDLE_ORDERS = ("random", "written")  # hub-key MQAR's layout of its needle pairs
TEXT_SPLITS = ("file", "blank_line")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class MQARConfig:
    """Multi-query associative recall (Zoology, Arora et al. 2023).

    An example is `num_kv_pairs` key-value pairs (keys from [1, vocab_size/2), values from
    [vocab_size/2, vocab_size), all distinct within the example) followed by a query region
    where every key reappears once, at gaps drawn from a power law with exponent `power_a`
    (1.0 = uniform; small = queries close to the start of the region). The target at a query
    position is the key's value and only those positions are scored. Other query-region
    tokens are 0, or uniform random ids when `random_non_queries`. Needs
    seq_len >= 4 * num_kv_pairs. `num_examples` is the size of the pool of examples that
    the rows of every batch are drawn from (uniformly, with replacement; see synthetic.py).

    `hub_keys` = m >= 1 makes the hub-key variant (the CCQ study's task where the key covariance
    is anisotropic per example): of the pairs, `num_needles` have distinct keys and are the only
    ones queried; the other num_kv_pairs - num_needles distractor pairs are keyed by m hub tokens
    drawn fresh per example (distractor j takes hub j mod m, so m = num_kv_pairs - num_needles
    gives every pair its own key: the isotropic control with the same number of writes), and the
    pairs are laid out in a random order. Needs seq_len >= 2 * num_kv_pairs + 2 * num_needles.
    `needle_order`: "random" (every pair at a random slot) or "written" (the needles keep their index
    order among themselves, as Zoology's MQAR writes its pairs, the distractors interleaved at random:
    MQAR's power-law gaps then put early-written needles early in the query region too).
    """

    vocab_size: int = 8192
    num_kv_pairs: int = 8
    power_a: float = 0.01
    random_non_queries: bool = True
    num_examples: int = 100_000
    hub_keys: int = 0
    num_needles: int = 8
    needle_order: str = "random"

    def __post_init__(self):
        check_field_types(self, "mqar.")
        _require(self.num_kv_pairs >= 1, f"mqar.num_kv_pairs: must be >= 1, got {self.num_kv_pairs}")
        _require(
            self.vocab_size // 2 - 1 >= self.num_kv_pairs,
            f"mqar.vocab_size: must give at least num_kv_pairs={self.num_kv_pairs} distinct keys in "
            f"[1, vocab_size/2), i.e. vocab_size >= {2 * self.num_kv_pairs + 2}; got {self.vocab_size}",
        )
        _require(0 < self.power_a <= 1, f"mqar.power_a: must be in (0, 1], got {self.power_a}")
        _require(self.num_examples >= 1, f"mqar.num_examples: must be >= 1, got {self.num_examples}")
        _require(self.hub_keys >= 0, f"mqar.hub_keys: must be >= 0 (0: Zoology's MQAR), got {self.hub_keys}")
        if self.hub_keys:
            _require(1 <= self.num_needles < self.num_kv_pairs,
                     f"mqar.num_needles: must be in [1, num_kv_pairs={self.num_kv_pairs}), got {self.num_needles}")
            _require(self.hub_keys <= self.distractors,
                     f"mqar.hub_keys: at most the {self.distractors} distractor pairs (num_kv_pairs - num_needles), "
                     f"got {self.hub_keys}")
        _require(self.needle_order in NEEDLE_ORDERS,
                 f"mqar.needle_order: expected one of {list(NEEDLE_ORDERS)}, got {self.needle_order!r}")

    @property
    def distractors(self) -> int:
        """The hub-key variant's distractor pairs."""
        return self.num_kv_pairs - self.num_needles

    def check_seq_len(self, seq_len: int) -> None:
        if self.hub_keys:
            _require(seq_len >= 2 * (self.num_kv_pairs + self.num_needles),
                     f"seq_len: hub-key MQAR with mqar.num_kv_pairs={self.num_kv_pairs}, num_needles="
                     f"{self.num_needles} needs seq_len >= {2 * (self.num_kv_pairs + self.num_needles)}, got {seq_len}")
            return
        _require(
            seq_len >= 4 * self.num_kv_pairs,
            f"seq_len: MQAR with mqar.num_kv_pairs={self.num_kv_pairs} needs seq_len >= "
            f"{4 * self.num_kv_pairs} (2 tokens per pair, 2 query slots per pair), got {seq_len}",
        )


@dataclasses.dataclass(frozen=True)
class NeedleConfig:
    """Synthetic needle retrieval: one key-value needle hidden in random filler, queried at the end.

    Token ids: 1 marks the needle, 2 marks the query, filler, key and value tokens are uniform
    in [3, vocab_size) (0 is never produced). An example of length T is
    `filler | 1 k_1..k_K v_1..v_V | filler | 2 k_1..k_K v_1..v_{V-1}`; the V positions whose
    targets are v_1..v_V are scored. `depth` in [0, 1] places the needle at that fraction of
    the filler (None: uniform random per example). Needs seq_len >= 2 (K + V) + 1.
    """

    vocab_size: int = 8192
    key_len: int = 2
    value_len: int = 4
    depth: float | None = None
    num_examples: int = 100_000

    NEEDLE_ID = 1
    QUERY_ID = 2
    FIRST_CONTENT_ID = 3

    def __post_init__(self):
        check_field_types(self, "needle.")
        _require(self.vocab_size >= 4, f"needle.vocab_size: must be >= 4 (3 reserved ids), got {self.vocab_size}")
        _require(self.key_len >= 1, f"needle.key_len: must be >= 1, got {self.key_len}")
        _require(self.value_len >= 1, f"needle.value_len: must be >= 1, got {self.value_len}")
        _require(
            self.depth is None or 0.0 <= self.depth <= 1.0, f"needle.depth: must be in [0, 1] or None, got {self.depth}"
        )
        _require(self.num_examples >= 1, f"needle.num_examples: must be >= 1, got {self.num_examples}")

    def check_seq_len(self, seq_len: int) -> None:
        need = 2 * (self.key_len + self.value_len) + 1
        _require(
            seq_len >= need,
            f"seq_len: the needle task with key_len={self.key_len}, value_len={self.value_len} needs "
            f"seq_len >= {need}, got {seq_len}",
        )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """One input pipeline: source, tokenizer, packing length, global batch, seed, epochs.

    `batch_size` is the global batch; each of the `process_count` hosts yields
    batch_size / process_count rows. `num_epochs=None` repeats forever (the trainer stops
    after its number of steps); a finite count ends the iterator, the last batch padded.
    `tokenizer` is "byte" (built in, no download) or the path of a `tokenizer.json`;
    `bos_token`/`eos_token` override the special tokens found for a `tokenizer.json`.
    `read_threads` read and tokenize documents in parallel (order stays deterministic);
    `prefetch_batches` are prepared in a background thread (0: none).
    """

    source: str = "mqar"
    paths: tuple[str, ...] = ()
    text_field: str = "text"
    text_split: str = "file"
    encoding_errors: str = "strict"
    hf_dataset: str = ""
    hf_config: str | None = None
    hf_split: str = "train"
    tokenizer: str = BYTE_TOKENIZER
    bos_token: str | None = None
    eos_token: str | None = None
    seq_len: int = 256
    batch_size: int = 32
    seed: int = 0
    shuffle: bool = True
    num_epochs: int | None = None
    read_threads: int = 4
    prefetch_batches: int = 2
    mqar: MQARConfig = dataclasses.field(default_factory=MQARConfig)
    needle: NeedleConfig = dataclasses.field(default_factory=NeedleConfig)

    def __post_init__(self):
        check_field_types(self)
        check_choice("source", self.source, SOURCES)
        check_choice("text_split", self.text_split, TEXT_SPLITS)
        check_choice("encoding_errors", self.encoding_errors, ENCODING_ERRORS)
        if self.source in FILE_SOURCES:
            _require(bool(self.paths), f"paths: source {self.source!r} needs at least one file, directory or glob")
        if self.source == "hf":
            _require(bool(self.hf_dataset), "hf_dataset: source 'hf' needs a dataset name or a local path")
        _require(bool(self.text_field), "text_field: must be a non-empty field name")
        _require(bool(self.tokenizer), f"tokenizer: must be {BYTE_TOKENIZER!r} or the path of a tokenizer.json")
        for name in ("bos_token", "eos_token"):
            _require(
                getattr(self, name) is None or self.tokenizer != BYTE_TOKENIZER,
                f"{name}: only used with a tokenizer.json; the byte tokenizer has fixed special ids",
            )
        _require(self.seq_len >= 2, f"seq_len: must be >= 2, got {self.seq_len}")
        _require(self.batch_size >= 1, f"batch_size: must be >= 1, got {self.batch_size}")
        _require(0 <= self.seed < 2**32, f"seed: must be in [0, 2**32), got {self.seed}")
        _require(
            self.num_epochs is None or self.num_epochs >= 1,
            f"num_epochs: must be >= 1 or None (repeat forever), got {self.num_epochs}",
        )
        _require(self.read_threads >= 1, f"read_threads: must be >= 1, got {self.read_threads}")
        _require(self.prefetch_batches >= 0, f"prefetch_batches: must be >= 0, got {self.prefetch_batches}")
        _require(
            self.num_epochs is None or self.source not in SYNTHETIC_SOURCES,
            f"num_epochs: synthetic batches never end (rows are drawn from a pool of "
            f"{self.source}.num_examples); leave it None, got {self.num_epochs}",
        )
        if self.source == "mqar":
            self.mqar.check_seq_len(self.seq_len)
        if self.source == "needle":
            self.needle.check_seq_len(self.seq_len)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, prefix: str = "") -> DataConfig:
        """From a (nested) mapping; `prefix` (e.g. "data.") is prepended to field names in errors."""
        return from_dict(cls, data, prefix=prefix)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)
