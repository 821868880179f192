"""Random-access document sources over local text, jsonl and parquet files and HF `datasets`.

Each source has `len()` and `[i]` returning the i-th document as a `str` (the grain
`RandomAccessDataSource` protocol), so the pipeline can shard, shuffle and resume by index.
Files are listed once, in sorted order, so the document order is deterministic.

- text: `split="file"` -> one document per file; `"blank_line"` -> one per paragraph (a run
  of non-blank lines, without the line break after its last line). Paragraphs are indexed
  by byte offsets, read lazily.
- jsonl: byte offsets of the non-blank lines, read lazily; the document is `record[field]`.
- parquet: the string column `field`, held in memory as an Arrow array (for corpora that do
  not fit, run `ccq-prepare-data` once and train from ArrayRecord shards).
- hf: a `datasets.Dataset` from a local `save_to_disk` directory, local data files, or a hub
  name found in the local cache; never downloads when HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from train.data.config import DataConfig

SUFFIXES = {"text": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}


def expand_paths(patterns: Sequence[str], suffix: str) -> list[Path]:
    """Files named by `patterns`: a file, a directory (its `*suffix` files, recursively) or a glob."""
    files: list[Path] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_file():
            found = [path]
        elif path.is_dir():
            found = sorted(p for p in path.rglob(f"*{suffix}") if p.is_file())
        else:
            found = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
        if not found:
            raise ValueError(f"paths: {pattern!r} matches no file (directories are searched for *{suffix})")
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

    def _bytes(self, i: int) -> tuple[Path, int, bytes]:
        file, start, end = (int(x) for x in self._index[i])
        return self._files[file], start, _read_span(self._files[file], start, end)


class TextFiles(_SpanSource):
    """UTF-8 text: one document per file, or per paragraph (`split="blank_line"`)."""

    def __init__(self, files: list[Path], split: str):
        if split == "file":
            super().__init__(files, lambda path: [(0, path.stat().st_size)])
        else:
            super().__init__(files, lambda path: _line_spans(path, paragraphs=True))

    def __getitem__(self, i: int) -> str:
        return self._bytes(i)[2].decode("utf-8")


class JsonlFiles(_SpanSource):
    """One JSON object per non-blank line; the document is its `field` (a string)."""

    def __init__(self, files: list[Path], field: str):
        super().__init__(files, lambda path: _line_spans(path, paragraphs=False))
        self._field = field
        if len(self):
            self[0]  # fail early on a wrong field name

    def __getitem__(self, i: int) -> str:
        path, start, line = self._bytes(i)
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"paths: {str(path)!r} at byte {start} is not valid JSON: {e}") from e
        text = record.get(self._field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise ValueError(
                f"text_field: the record at byte {start} of {str(path)!r} has no string field "
                f"{self._field!r} (it has {keys})"
            )
        return text


class ParquetFiles:
    """The string column `field` of parquet files, concatenated in file order."""

    def __init__(self, files: list[Path], field: str):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError("source 'parquet' needs `pip install pyarrow`") from e
        columns = []
        for path in files:
            names = pq.read_schema(path).names
            if field not in names:
                raise ValueError(f"text_field: {str(path)!r} has no column {field!r} (columns: {names})")
            column = pq.read_table(path, columns=[field]).column(field)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise ValueError(f"text_field: column {field!r} of {str(path)!r} holds {column.type}, not strings")
            if column.null_count:
                raise ValueError(f"text_field: column {field!r} of {str(path)!r} has {column.null_count} null values")
            columns.extend(chunk.cast(pa.large_string()) for chunk in column.chunks)
        self._column = pa.chunked_array(columns, type=pa.large_string()).combine_chunks()

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, i: int) -> str:
        return self._column[i].as_py()


class HFDataset:
    """The string column `field` of a Hugging Face `datasets.Dataset`."""

    def __init__(self, dataset, field: str):
        if field not in dataset.column_names:
            raise ValueError(f"text_field: the dataset has no column {field!r} (columns: {dataset.column_names})")
        self._dataset = dataset.select_columns([field])
        self._field = field

    def __len__(self) -> int:
        return len(self._dataset)

    def __getitem__(self, i: int) -> str:
        return self._dataset[int(i)][self._field]


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json"))


def load_hf_dataset(config: DataConfig):
    """`config.hf_dataset` as a `datasets.Dataset` (split `hf_split`), offline-aware, with clear errors."""
    try:
        import datasets
    except ImportError as e:
        raise ImportError("source 'hf' needs the optional package `datasets` (pip install datasets)") from e
    name = config.hf_dataset
    try:
        if _is_saved_dataset(Path(name)):
            dataset = datasets.load_from_disk(name)
        else:
            dataset = datasets.load_dataset(name, config.hf_config, split=config.hf_split)
    except (ConnectionError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as e:
        offline = " (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)" if datasets.config.HF_HUB_OFFLINE else ""
        raise ValueError(
            f"hf_dataset: cannot load {name!r}{offline}: it is neither a local dataset directory nor in the "
            f"local cache ({datasets.config.HF_DATASETS_CACHE}) and the hub cannot be reached. Pass a directory "
            f"written by Dataset.save_to_disk, or load it once on a machine with network and copy the cache. "
            f"Cause: {e}"
        ) from e
    if isinstance(dataset, datasets.DatasetDict):
        if config.hf_split not in dataset:
            raise ValueError(f"hf_split: {name!r} has no split {config.hf_split!r} (splits: {sorted(dataset)})")
        dataset = dataset[config.hf_split]
    return dataset


def text_source(config: DataConfig):
    """The document source (str documents) for a text-like `config.source`."""
    if config.source == "hf":
        return HFDataset(load_hf_dataset(config), config.text_field)
    files = expand_paths(config.paths, SUFFIXES[config.source])
    if config.source == "text":
        return TextFiles(files, config.text_split)
    if config.source == "jsonl":
        return JsonlFiles(files, config.text_field)
    return ParquetFiles(files, config.text_field)
