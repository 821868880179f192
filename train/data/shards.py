"""The on-disk format of pre-tokenised corpora: ArrayRecord shards plus a JSON manifest.

A prepared directory holds `shard-00000-of-0000N.array_record` files and `manifest.json`.
Each record is one document's token ids (no BOS/EOS: the pipeline adds them) as
little-endian `uint16` when the vocabulary fits in 16 bits, else `uint32`. The manifest:

    {"format": "ccq-token-shards", "version": 1, "dtype": "<u2",
     "tokenizer": {...Tokenizer.spec...}, "documents": D, "tokens": N,
     "shards": [{"file": "shard-00000-of-00002.array_record", "documents": d, "tokens": n}, ...],
     "source": {...the DataConfig fields that described the corpus...}}

`ShardWriter` writes it (used by `ccq-prepare-data`); `TokenShards` reads one or more
prepared directories as one random-access source of int32 token arrays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ccq_jax.tokenizers import same_tokenizer

FORMAT = "ccq-token-shards"
VERSION = 1
MANIFEST = "manifest.json"


def token_dtype(vocab_size: int) -> str:
    return "<u2" if vocab_size <= 2**16 else "<u4"


def shard_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}.array_record"


class ShardWriter:
    """Writes `num_documents` documents into `ceil(num_documents / docs_per_shard)` shards, in order."""

    def __init__(self, directory: str | Path, *, num_documents: int, docs_per_shard: int, tokenizer_spec: dict):
        from array_record.python.array_record_module import ArrayRecordWriter

        self._writer_cls = ArrayRecordWriter
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._docs_per_shard = docs_per_shard
        self._num_shards = max(1, -(-num_documents // docs_per_shard))
        self._dtype = token_dtype(tokenizer_spec["vocab_size"])
        self._tokenizer_spec = tokenizer_spec
        self._shards: list[dict[str, Any]] = []
        self._writer = None

    def write(self, tokens: np.ndarray) -> None:
        if self._writer is None or self._shards[-1]["documents"] == self._docs_per_shard:
            self._open_next()
        self._writer.write(np.asarray(tokens).astype(self._dtype).tobytes())
        self._shards[-1]["documents"] += 1
        self._shards[-1]["tokens"] += len(tokens)

    def _open_next(self) -> None:
        if self._writer is not None:
            self._writer.close()
        name = shard_name(len(self._shards), self._num_shards)
        # group_size:1 keeps every record individually addressable (fast random access).
        self._writer = self._writer_cls(str(self.directory / name), "group_size:1")
        self._shards.append({"file": name, "documents": 0, "tokens": 0})

    def close(self, source: dict[str, Any]) -> dict[str, Any]:
        """Finish the last shard and write the manifest; returns it."""
        if self._writer is not None:
            self._writer.close()
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "dtype": self._dtype,
            "tokenizer": self._tokenizer_spec,
            "documents": sum(s["documents"] for s in self._shards),
            "tokens": sum(s["tokens"] for s in self._shards),
            "shards": self._shards,
            "source": source,
        }
        (self.directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest


def read_manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(directory, manifest) of a prepared directory or its manifest.json."""
    path = Path(path)
    directory = path if path.is_dir() else path.parent
    file = directory / MANIFEST
    if not file.is_file():
        raise ValueError(f"paths: {str(path)!r} is not a directory prepared by ccq-prepare-data (no {MANIFEST})")
    manifest = json.loads(file.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ValueError(f"paths: {str(file)!r} is not a {FORMAT} v{VERSION} manifest")
    return directory, manifest


class TokenShards:
    """Prepared directories as one source: [i] -> int32 token ids of document i (in manifest order)."""

    def __init__(self, paths: Sequence[str]):
        import grain

        files, dtypes = [], []
        self.tokenizer_spec: dict[str, Any] | None = None
        for path in paths:
            directory, manifest = read_manifest(path)
            if self.tokenizer_spec is None:
                self.tokenizer_spec = manifest["tokenizer"]
            elif not same_tokenizer(self.tokenizer_spec, manifest["tokenizer"]):
                raise ValueError(f"paths: {str(path)!r} was tokenised differently from {paths[0]!r}")
            for shard in manifest["shards"]:
                file = directory / shard["file"]
                if not file.is_file():
                    raise ValueError(f"paths: shard {str(file)!r} listed in the manifest is missing")
                if shard["documents"]:
                    files.append(str(file))
                    dtypes.append(manifest["dtype"])
        if len(set(dtypes)) > 1:
            raise ValueError(f"paths: the prepared directories use different token dtypes {sorted(set(dtypes))}")
        self._dtype = dtypes[0] if dtypes else "<u4"
        self._records = grain.sources.ArrayRecordDataSource(files) if files else []

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.frombuffer(self._records[i], dtype=self._dtype).astype(np.int32)
