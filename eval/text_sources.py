"""Documents for evaluation from local .txt/.jsonl/.parquet files (a file, folder or glob) or a HF dataset.

A thin layer over `ccq_jax.documents` (the readers training uses too): each local file is read
by its suffix, and a .txt file is ONE document (training can also split text into paragraphs).
A folder is searched recursively for the three suffixes; a file or a glob's matches are taken
as named and must have one of them. jsonl/parquet/HF documents are the string field `column`.

A glob, or an existing path that is not a `Dataset.save_to_disk` folder, is local. A string
that looks like a path but names nothing (it starts with `.`, `~` or `/`, has more than one `/`,
or ends in .txt/.jsonl/.parquet/.json/.csv) is an error naming it, never a dataset name sent to
the hub; a hub id `name` or `owner/name` has at most one `/`. Anything else (a saved folder, or
a name) is loaded as a Hugging Face dataset with
`datasets.load_from_disk` / `datasets.load_dataset`. Air-gapped: pre-populate the HF cache and
set `HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1`, or point at local files.
"""

import itertools
from pathlib import Path

from ccq_jax.documents import (
    SUFFIXES,
    ArgNames,
    HFDataset,
    expand_paths,
    file_source,
    is_saved_dataset,
    load_hf_dataset,
)

ARG_NAMES = ArgNames(paths="source", field="column", dataset="source", split="split")
FILE_SUFFIXES = (*SUFFIXES.values(), ".json", ".csv")


def looks_like_path(source: str) -> bool:
    """Whether `source` can only be a local path: it starts with `.`, `~` or a separator, has more separators than
    a hub id's one (owner/name), or ends in a data file's suffix."""
    return (source.startswith((".", "~", "/", "\\")) or source.count("/") + source.count("\\") > 1
            or source.endswith(FILE_SUFFIXES))


def _is_local(source: str) -> bool:
    path = Path(source)
    return any(ch in source for ch in "*?[") or (path.exists() and not is_saved_dataset(path))


def _kind(path: Path) -> str | None:
    """The key of `SUFFIXES` whose suffix `path` has, or None."""
    return next((kind for kind, suffix in SUFFIXES.items() if path.name.endswith(suffix)), None)


def local_files(source: str) -> list[Path]:
    """The .txt/.jsonl/.parquet files `source` names (a file, a folder searched recursively, or a glob), sorted.

    [] when `source` is not local (then it names a HF dataset); ValueError when it is local but
    matches no file, or names a file of another kind.
    """
    if not _is_local(source):
        if looks_like_path(source) and not Path(source).exists():
            raise ValueError(f"source: {source!r} does not exist (it looks like a local path, so it is not looked up "
                             "as a Hugging Face dataset)")
        return []
    files = expand_paths([source], tuple(SUFFIXES.values()), ARG_NAMES)
    for path in files:
        if _kind(path) is None:
            raise ValueError(
                f"source: {str(path)!r} is not one of {', '.join(SUFFIXES.values())} "
                "(name a folder to read only those files)"
            )
    return files


def load_texts(
    source: str, *, column: str = "text", split: str = "test", config: str | None = None, limit: int | None = None,
    encoding_errors: str = "strict",
) -> list[str]:
    """Documents (strings) from local files or a HF dataset; a .txt file is one document.

    column: the string field of .jsonl records / the parquet or HF column. split/config: HF only.
    limit: keep the first `limit` documents (later files are not read). encoding_errors: for bytes that are not
    UTF-8 in .txt/.jsonl files ("strict": a ValueError naming the file, "replace", "ignore").
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit: expected a count >= 0 or None, got {limit}")
    files = local_files(source)
    if files:
        sources = (file_source(_kind(p), [p], field=column, text_split="file", names=ARG_NAMES,
                               encoding_errors=encoding_errors) for p in files)
    else:
        dataset = load_hf_dataset(source, config=config, split=split, names=ARG_NAMES)
        sources = iter([HFDataset(dataset, column, ARG_NAMES)])
    documents = (src[i] for src in sources for i in range(len(src)))
    return list(itertools.islice(documents, limit))
