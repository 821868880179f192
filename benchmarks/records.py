"""Benchmark rows as JSON lines: printed, and appended to a file."""

import json


def show(rows) -> list:
    """Print each row as one JSON line (flushed); returns the rows."""
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def append(path, rows) -> None:
    """Append the rows to `path` as JSON lines (nothing when path is None or empty)."""
    if path:
        with open(path, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
