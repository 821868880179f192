"""Move a built corpus in one small file: its documents' text (xz -9) plus the tokenizer, re-tokenised on arrival.

`pack` writes a tar.xz holding `documents/{train,heldout}/*.jsonl`, `tokenizer/` and
`pack.json` (what was packed). With `fraction` < 1 only the training documents of that
nested hash subset (`study.split.in_subset`) go in; held-out documents always go in whole.
Without `fraction`, the whole corpus is tried first and, when it exceeds `max_mib`, a
fraction estimated from the compressed size is tried (up to 3 times). `unpack` extracts such
a file and runs `ccq-prepare-data` for both splits, so the shards there are the ones a full
build makes from the same documents.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

from ccq_jax.progress import progress
from study.build import prepare_shards
from study.split import HELDOUT, SPLITS, TRAIN, in_subset

MIB = 2**20
XZ = ["xz", "-9", "-T1", "-c"]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _subset_lines(path: Path, fraction: float, heldout: float) -> tuple[bytes, int]:
    kept, count = [], 0
    with open(path, "rb") as f:
        for line in f:
            if fraction >= 1.0 or in_subset(json.loads(line)["path"], fraction, heldout):
                kept.append(line)
                count += 1
    return b"".join(kept), count


def write_pack(corpus: Path, out: Path, fraction: float = 1.0) -> dict:
    """Pack `corpus` (a `build` output) into `out` with training subset `fraction`; returns pack.json's content."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction}")
    files = sorted((corpus / "documents").glob("*/*.jsonl"))
    if not files or not (corpus / "stats.json").is_file():
        raise ValueError(f"corpus: {str(corpus)!r} has no documents/*/*.jsonl and stats.json; run `build` first")
    heldout = json.loads((corpus / "stats.json").read_text()).get("heldout", HELDOUT)
    documents = {split: 0 for split in SPLITS}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as sink:
        xz = subprocess.Popen(XZ, stdin=subprocess.PIPE, stdout=sink)
        with tarfile.open(fileobj=xz.stdin, mode="w|") as tar:
            for path in progress(files, desc="packing", unit="file"):
                split = path.parent.name
                data, count = _subset_lines(path, fraction if split == TRAIN else 1.0, heldout)
                documents[split] += count
                _add(tar, f"documents/{split}/{path.name}", data)
            for path in sorted((corpus / "tokenizer").iterdir()):
                _add(tar, f"tokenizer/{path.name}", path.read_bytes())
            info = {"fraction": fraction, "documents": documents}
            _add(tar, "pack.json", (json.dumps(info, indent=2) + "\n").encode())
        xz.stdin.close()
        if xz.wait() != 0:
            raise RuntimeError(f"xz failed with exit status {xz.returncode}")
    info["mib"] = out.stat().st_size / MIB
    return info


def pack(corpus: Path, out: Path, *, max_mib: float = 45.0, fraction: float | None = None) -> dict:
    """Pack `corpus` into `out`, at most `max_mib` MiB: the given `fraction`, else the largest that fits (estimated)."""
    if max_mib <= 0:
        raise ValueError(f"max_mib: must be > 0, got {max_mib}")
    tries = [fraction] if fraction is not None else [1.0, None, None]
    info = {}
    for attempt in tries:
        if attempt is None:  # shrink the training subset in proportion to the overshoot, with a margin
            attempt = round(info["fraction"] * max_mib / info["mib"] * 0.98, 4)
        start = time.perf_counter()
        info = write_pack(corpus, out, attempt)
        print(f"pack: fraction {attempt} -> {info['mib']:.1f} MiB in {time.perf_counter() - start:.0f} s", flush=True)
        if info["mib"] <= max_mib:
            return info
    raise ValueError(f"max_mib: {out} is {info['mib']:.1f} MiB > {max_mib} MiB; pass a smaller --fraction")


def unpack(file: Path, out: Path, threads: int = 4) -> dict[str, float]:
    """Extract a pack into `out` and tokenise both splits there with ccq-prepare-data; returns seconds per split."""
    if not file.is_file():
        raise ValueError(f"file: {str(file)!r} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(file, "r:xz") as tar:
        tar.extractall(out, filter="data")
    return prepare_shards(out, threads)
