"""The document source a `DataConfig` names: `source` text, jsonl, parquet or hf, read by `ccq_jax.documents`.

Each source has `len()` and `[i]` returning the i-th document as a `str` (the grain
`RandomAccessDataSource` protocol), so the pipeline can shard, shuffle and resume by index.
`paths` are listed once, in sorted order, so the document order is deterministic: a file is
read as `source` says whatever its name, a directory is searched recursively for files with
the source's suffix (.txt, .jsonl, .parquet), a glob takes its matching files.

- text: `text_split="file"` -> one document per file; `"blank_line"` -> one per paragraph.
- jsonl / parquet: the document is the string `text_field` of a record / row.
- hf: `hf_dataset` (split `hf_split`, config `hf_config`) from a local `save_to_disk`
  directory, local data files, or a hub name found in the local cache; never downloads when
  HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set.

Errors name the `DataConfig` field at fault; a corpus without a document is refused.
"""

from __future__ import annotations

from ccq_jax.documents import (SUFFIXES, ArgNames, HFDataset, TextFiles, expand_paths, file_source,
                               load_hf_dataset)
from train.data.config import DataConfig

CONFIG_NAMES = ArgNames(paths="paths", field="text_field", dataset="hf_dataset", split="hf_split")


def text_source(config: DataConfig):
    """The document source (str documents) for a text-like `config.source`; ValueError when it has none."""
    if config.source == "hf":
        dataset = load_hf_dataset(config.hf_dataset, config=config.hf_config, split=config.hf_split, names=CONFIG_NAMES)
        source, where = HFDataset(dataset, config.text_field, CONFIG_NAMES), f"hf_dataset: {config.hf_dataset!r}"
    else:
        files = expand_paths(config.paths, (SUFFIXES[config.source],), CONFIG_NAMES)
        source = file_source(config.source, files, field=config.text_field, text_split=config.text_split,
                             names=CONFIG_NAMES, encoding_errors=config.encoding_errors)
        where = f"paths: {list(config.paths)}"
    if not len(source) or (isinstance(source, TextFiles) and not source.num_bytes):
        raise ValueError(f"{where} hold no document (empty files or blank lines only); nothing to train on")
    # records of empty text would train on BOS/EOS alone; the scan stops at the first document with text
    if not isinstance(source, TextFiles) and not any(source[i] for i in range(len(source))):
        raise ValueError(f"{where} hold {len(source)} records whose {config.text_field!r} is empty text; nothing to "
                         f"train on")
    return source
