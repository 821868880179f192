"""Random-access document sources over local text, jsonl and parquet files and HF `datasets`.

Shared by training (`train.data.sources` picks the source a `DataConfig` names) and
evaluation (`eval.text_sources` reads each file by its suffix). Each source has `len()` and
`[i]` returning the i-th document as a `str` (the grain `RandomAccessDataSource` protocol),
so the training pipeline can shard, shuffle and resume by index.

- `expand_paths`: a file is taken as named (whatever its suffix), a directory gives its files
  ending in one of the wanted suffixes (recursively), a glob its matching files; each sorted,
  so the document order is deterministic.
- text: `split="file"` -> one document per file; `"blank_line"` -> one per paragraph (a run
  of non-blank lines, without the line break after its last line). Paragraphs are indexed
  by byte offsets, read lazily; `num_bytes` is the text's size (0: empty files only).
- text and jsonl are UTF-8: bytes that are not raise a ValueError naming the file and the byte
  offset, unless `encoding_errors` (Python's `errors=` of `bytes.decode`: "strict", "replace",
  "ignore") says to replace or drop them.
- jsonl: byte offsets of the non-blank lines, read lazily; the document is `record[field]`.
- parquet: the string column `field`, held in memory as an Arrow array (for training corpora
  that do not fit, run `ccq-prepare-data` once and train from ArrayRecord shards).
- hf: `load_hf_dataset` gives a `datasets.Dataset` from a local `save_to_disk` directory, local
  data files, or a hub name found in the local cache; it never downloads when
  HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set, and says so when loading fails.

Bad input raises a `ValueError` that starts with the caller's name for the argument at fault
(`ArgNames`) and, for a missing field, column or split, suggests the closest one.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccq_jax.configlib import suggestion

SUFFIXES = {"text": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}
ENCODING_ERRORS = ("strict", "replace", "ignore")


@dataclass(frozen=True)
class ArgNames:
    """The caller's names, used in error messages, for the file paths, the text field, the HF dataset and its split."""

    paths: str
    field: str
    dataset: str
    split: str


def expand_paths(patterns: Sequence[str], suffixes: Sequence[str], names: ArgNames) -> list[Path]:
    """Files named by `patterns`: a file, a directory (its files ending in one of `suffixes`, recursively) or a glob."""
    files: list[Path] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_file():
            found = [path]
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(tuple(suffixes)))
        else:
            found = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
        if not found:
            wanted = ", ".join(f"*{s}" for s in suffixes)
            raise ValueError(f"{names.paths}: {pattern!r} matches no file (directories are searched for {wanted})")
        files.extend(found)
    return files


def _read_span(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _line_spans(path: Path, paragraphs: bool) -> list[tuple[int, int]]:
    """(start, end) byte spans of non-blank lines, or of paragraphs (runs of them), line breaks excluded."""
    spans, start, end, offset = [], None, 0, 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                if start is None:
                    start = offset
                end = offset + len(line.rstrip(b"\r\n"))
                if not paragraphs:
                    spans.append((start, end))
                    start = None
            elif start is not None:
                spans.append((start, end))
                start = None
            offset += len(line)
    if start is not None:
        spans.append((start, end))
    return spans


class _SpanSource:
    """Documents stored as byte spans of files: index [i] -> (file number, start, end)."""

    def __init__(self, files: list[Path], spans_of_file):
        self._files = files
        rows = [(i, s, e) for i, path in enumerate(files) for s, e in spans_of_file(path)]
        self._index = np.array(rows, dtype=np.int64).reshape(-1, 3)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def num_bytes(self) -> int:
        """The bytes of all documents together."""
        return int((self._index[:, 2] - self._index[:, 1]).sum())

    def _bytes(self, i: int) -> tuple[Path, int, bytes]:
        file, start, end = (int(x) for x in self._index[i])
        return self._files[file], start, _read_span(self._files[file], start, end)

    def _text(self, i: int, errors: str, names: ArgNames) -> tuple[Path, int, str]:
        """(file, byte offset, the document's bytes decoded as UTF-8 with `errors`)."""
        path, start, data = self._bytes(i)
        try:
            return path, start, data.decode("utf-8", errors)
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{names.paths}: {str(path)!r} is not UTF-8 text (byte {start + e.start}: {e.reason}); fix the file or "
                "read it with encoding_errors='replace' or 'ignore'"
            ) from e


class TextFiles(_SpanSource):
    """UTF-8 text: one document per file, or per paragraph (`split="blank_line"`)."""

    def __init__(self, files: list[Path], split: str, names: ArgNames, encoding_errors: str = "strict"):
        if split == "file":
            super().__init__(files, lambda path: [(0, path.stat().st_size)])
        else:
            super().__init__(files, lambda path: _line_spans(path, paragraphs=True))
        self._names, self._errors = names, encoding_errors

    def __getitem__(self, i: int) -> str:
        return self._text(i, self._errors, self._names)[2]


class JsonlFiles(_SpanSource):
    """One JSON object per non-blank line; the document is its `field` (a string)."""

    def __init__(self, files: list[Path], field: str, names: ArgNames, encoding_errors: str = "strict"):
        super().__init__(files, lambda path: _line_spans(path, paragraphs=False))
        self._field = field
        self._names = names
        self._errors = encoding_errors
        if len(self):
            self[0]  # fail early on a wrong field name

    def __getitem__(self, i: int) -> str:
        path, start, line = self._text(i, self._errors, self._names)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{self._names.paths}: {str(path)!r} at byte {start} is not valid JSON: {e}") from e
        text = record.get(self._field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            if isinstance(record, dict):
                has = f"it has {sorted(record)}"
                hint = suggestion(self._field, [k for k in record if k != self._field])
            else:
                has, hint = f"it is a {type(record).__name__}, not a JSON object", ""
            raise ValueError(
                f"{self._names.field}: the record at byte {start} of {str(path)!r} has no string field "
                f"{self._field!r} ({has}){hint}"
            )
        return text


class ParquetFiles:
    """The string column `field` of parquet files, concatenated in file order."""

    def __init__(self, files: list[Path], field: str, names: ArgNames):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError("reading parquet files needs `pip install pyarrow`") from e
        arg = names.field
        columns = []
        for path in files:
            present = pq.read_schema(path).names
            if field not in present:
                hint = suggestion(field, present)
                raise ValueError(f"{arg}: {str(path)!r} has no column {field!r} (columns: {present}){hint}")
            column = pq.read_table(path, columns=[field]).column(field)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise ValueError(f"{arg}: column {field!r} of {str(path)!r} holds {column.type}, not strings")
            if column.null_count:
                raise ValueError(f"{arg}: column {field!r} of {str(path)!r} has {column.null_count} null values")
            columns.extend(chunk.cast(pa.large_string()) for chunk in column.chunks)
        self._column = pa.chunked_array(columns, type=pa.large_string()).combine_chunks()

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, i: int) -> str:
        return self._column[i].as_py()


def file_source(kind: str, files: list[Path], *, field: str, text_split: str, names: ArgNames,
                encoding_errors: str = "strict"):
    """The source over `files` of `kind` ("text", "jsonl" or "parquet"; a key of `SUFFIXES`); `encoding_errors`:
    one of `ENCODING_ERRORS`, for the UTF-8 of text and jsonl files."""
    if kind == "text":
        return TextFiles(files, text_split, names, encoding_errors)
    if kind == "jsonl":
        return JsonlFiles(files, field, names, encoding_errors)
    return ParquetFiles(files, field, names)


class HFDataset:
    """The string column `field` of a Hugging Face `datasets.Dataset`."""

    def __init__(self, dataset, field: str, names: ArgNames):
        columns = dataset.column_names
        if field not in columns:
            hint = suggestion(field, columns)
            raise ValueError(f"{names.field}: the dataset has no column {field!r} (columns: {columns}){hint}")
        self._dataset = dataset.select_columns([field])
        self._field = field

    def __len__(self) -> int:
        return len(self._dataset)

    def __getitem__(self, i: int) -> str:
        return self._dataset[int(i)][self._field]


def is_saved_dataset(path: Path) -> bool:
    """Whether `path` is a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`."""
    return path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json"))


def load_hf_dataset(name: str, *, config: str | None, split: str, names: ArgNames):
    """Dataset `name` (config `config`, split `split`) as a `datasets.Dataset`, offline-aware, with clear errors."""
    try:
        import datasets
    except ImportError as e:
        raise ImportError(
            f"{names.dataset}: loading {name!r} as a Hugging Face dataset needs the optional package `datasets` "
            "(pip install datasets)"
        ) from e
    try:
        if is_saved_dataset(Path(name)):
            dataset = datasets.load_from_disk(name)
        else:
            dataset = datasets.load_dataset(name, config, split=split)
    except (ConnectionError, FileNotFoundError) as e:  # DatasetNotFoundError is a FileNotFoundError
        offline = " (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)" if datasets.config.HF_HUB_OFFLINE else ""
        raise ValueError(
            f"{names.dataset}: cannot load {name!r}{offline}: it is neither a local path (data files, or a directory "
            f"written by Dataset.save_to_disk) nor in the local cache ({datasets.config.HF_DATASETS_CACHE}) "
            f"with config {config!r}, split {split!r}, and the hub cannot be reached. Offline, pass local files or a "
            "saved directory, or load it once on a machine with network, copy the cache and set "
            f"HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1. Cause: {type(e).__name__}: {e}"
        ) from e
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            hint = suggestion(split, dataset)
            raise ValueError(f"{names.split}: {name!r} has no split {split!r} (splits: {sorted(dataset)}){hint}")
        dataset = dataset[split]
    return dataset
