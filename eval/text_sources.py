"""Documents for evaluation from local .txt/.jsonl/.parquet files (a file, folder or glob) or a HF dataset.

Local paths come first; a name that is not a local path is treated as a Hugging Face dataset id
and loaded with `datasets.load_dataset`. Air-gapped: pre-populate the HF cache and set
`HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1`, or point at local files.
"""

import difflib
import glob
import os
from pathlib import Path

from eval.records import read_jsonl

SUFFIXES = (".txt", ".jsonl", ".parquet")


def _missing_column(column: str, names: list[str], where: str) -> ValueError:
    close = difflib.get_close_matches(column, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ValueError(f"column: {where} has no field {column!r} (fields: {sorted(names)}){hint}")


def _column(records: list[dict], column: str, where: str) -> list[str]:
    for i, rec in enumerate(records):
        if column not in rec:
            raise _missing_column(column, list(rec), f"{where} record {i}")
    return [str(rec[column]) for rec in records]


def _read_file(path: Path, column: str) -> list[str]:
    if path.suffix == ".txt":
        return [path.read_text(encoding="utf-8")]
    if path.suffix == ".jsonl":
        return _column(read_jsonl(path), column, str(path))
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    if column not in names:
        raise _missing_column(column, names, str(path))
    return [str(x) for x in pq.read_table(path, columns=[column]).column(column).to_pylist()]


def local_files(source: str) -> list[Path]:
    """The supported files `source` names (a file, a folder searched recursively, or a glob), sorted; [] if none exist."""
    if any(ch in source for ch in "*?["):
        paths = [Path(p) for p in glob.glob(source, recursive=True)]
    elif os.path.isdir(source):
        paths = [p for p in Path(source).rglob("*") if p.is_file()]
    elif os.path.isfile(source):
        if Path(source).suffix not in SUFFIXES:
            raise ValueError(f"source: {source} is not one of {', '.join(SUFFIXES)}")
        return [Path(source)]
    else:
        return []
    return sorted(p for p in paths if p.suffix in SUFFIXES)


def _load_hub(source: str, *, column: str, split: str, config: str | None) -> list[str]:
    try:
        import datasets
    except ImportError as e:
        raise ValueError(
            f"source: {source!r} is not a local file, folder or glob, and the `datasets` package needed to load it "
            "as a Hugging Face dataset is not installed"
        ) from e
    try:
        ds = datasets.load_dataset(source, config, split=split)
    except Exception as e:
        raise ValueError(
            f"source: {source!r} is not a local .txt/.jsonl/.parquet file, folder or glob, and loading it as a "
            f"Hugging Face dataset (config={config!r}, split={split!r}) failed: {type(e).__name__}: {e}. Offline, "
            "pre-populate the HF cache and set HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1, or pass local files."
        ) from e
    if column not in ds.column_names:
        raise _missing_column(column, ds.column_names, source)
    return [str(x) for x in ds[column]]


def load_texts(
    source: str, *, column: str = "text", split: str = "test", config: str | None = None, limit: int | None = None
) -> list[str]:
    """Documents (strings) from local files or a HF dataset; a .txt file is one document.

    column: the field of .jsonl records / the parquet or HF column. split/config: HF only.
    limit: keep the first `limit` documents.
    """
    files = local_files(source)
    if files:
        texts = [t for p in files for t in _read_file(p, column)]
    elif Path(source).exists() or any(ch in source for ch in "*?["):
        raise ValueError(f"source: {source} holds no {', '.join(SUFFIXES)} file")
    else:
        texts = _load_hub(source, column=column, split=split, config=config)
    return texts[:limit] if limit is not None else texts
