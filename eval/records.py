"""Reading and writing the JSON / JSONL files of evaluation data and results (UTF-8, parent folders created).

A JSONL path ending in ``.gz`` is read and written gzip-compressed (per-sample records compress about 10x).
"""

import gzip
import json
from pathlib import Path


def _open_text(path: Path, mode: str):
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")
    return path.open(mode, encoding="utf-8")


def read_jsonl(path) -> list[dict]:
    """One JSON value per non-blank line."""
    with _open_text(Path(path), "r") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, records) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_text(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def write_json(path, obj) -> Path:
    """Indented JSON; integer dict keys (lengths, depths, layers) become strings, as JSON requires."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
