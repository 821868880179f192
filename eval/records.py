"""Reading and writing the JSON / JSONL files of evaluation data and results (UTF-8, parent folders created)."""

import json
from pathlib import Path


def read_jsonl(path) -> list[dict]:
    """One JSON value per non-blank line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path, records) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def write_json(path, obj) -> Path:
    """Indented JSON; integer dict keys (lengths, depths, layers) become strings, as JSON requires."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
