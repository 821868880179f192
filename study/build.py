"""Build the corpus: packages -> JSONL documents per split -> tokenizer -> ArrayRecord shards -> stats.json.

Layout of the output directory `out`:

    documents/train/PACKAGE.jsonl, documents/heldout/PACKAGE.jsonl   {"text", "source", "path"} per line
    tokenizer/tokenizer.json, tokenizer/tokenizer_config.json        trained on documents/train only
    shards/train/, shards/heldout/                                   written by ccq-prepare-data
    stats.json                                                       documents, bytes, tokens per source and split

Packages are processed in name order and files in path order, so the documents, and hence
the shards, come out the same on every run. The .deb files are cached in `cache`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from ccq_jax.progress import progress
from study.documents import tree_documents
from study.extract import extract_deb
from study.manifest import Manifest, fetch_deb
from study.split import SPLITS, TRAIN, split_of
from study.tokenizer import train_tokenizer
from train.data.prepare import main as prepare_main
from train.data.shards import TokenShards


def write_documents(manifest: Manifest, cache: Path, out: Path) -> dict:
    """Download, extract and convert every package; write the JSONL files; returns per-source counts."""
    seen: set[str] = set()
    sources = {}
    for split in SPLITS:
        (out / "documents" / split).mkdir(parents=True, exist_ok=True)
    for package in progress(manifest.packages, desc="packages", unit="pkg"):
        deb = fetch_deb(package, cache)
        counts = {split: {"documents": 0, "bytes": 0} for split in SPLITS}
        skipped: dict[str, int] = {}
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            root = Path(tmp)
            extract_deb(deb, root, package.tarballs)
            files = {split: open(out / "documents" / split / f"{package.package}.jsonl", "w") for split in SPLITS}
            try:
                documents = tree_documents(root, include=package.include, exclude=manifest.exclude + package.exclude,
                                           seen=seen, counts=skipped)
                for rel, text in documents:
                    path = f"{package.package}/{rel}"
                    split = split_of(path, manifest.heldout)
                    files[split].write(json.dumps({"text": text, "source": package.package, "path": path}) + "\n")
                    counts[split]["documents"] += 1
                    counts[split]["bytes"] += len(text.encode("utf-8"))
            finally:
                for f in files.values():
                    f.close()
        sources[package.package] = {"version": package.version, "kind": package.kind, "skipped": skipped, **counts}
        print(f"{package.package}: {sum(c['documents'] for c in counts.values()):,} documents, "
              f"{sum(c['bytes'] for c in counts.values()) / 1e6:.1f} MB, skipped {skipped}", flush=True)
    return sources


def read_texts(paths: list[Path]):
    for path in paths:
        with open(path) as f:
            for line in f:
                yield json.loads(line)["text"]


def prepare_args(out: Path, split: str, threads: int) -> list[str]:
    """The `ccq-prepare-data` arguments that tokenise `out`'s documents of `split` into its shards."""
    return ["--source", "jsonl", "--paths", str(out / "documents" / split),
            "--tokenizer", str(out / "tokenizer" / "tokenizer.json"),
            "--output", str(out / "shards" / split), "--threads", str(threads), "--overwrite"]


def prepare_shards(out: Path, threads: int) -> dict[str, float]:
    """Run ccq-prepare-data (in this process) for both splits; returns the seconds each took."""
    seconds = {}
    for split in SPLITS:
        start = time.perf_counter()
        args = prepare_args(out, split, threads)
        print("ccq-prepare-data " + " ".join(args), flush=True)
        prepare_main(args)
        seconds[split] = time.perf_counter() - start
    return seconds


def token_counts(out: Path, split: str, sources: dict) -> None:
    """Add each source's token count of `split` to `sources`, read back from the shards (in source order)."""
    shards = TokenShards([str(out / "shards" / split)])
    index = 0
    for name in sorted(sources):
        count = sources[name][split]["documents"]
        sources[name][split]["tokens"] = sum(len(shards[i]) for i in range(index, index + count))
        index += count
    if index != len(shards):
        raise ValueError(f"shards: {split} has {len(shards)} documents, the JSONL files {index}")


def build(manifest: Manifest, out: Path, cache: Path, threads: int = 1) -> dict:
    """Build everything under `out` (see the module docstring); returns the stats also written to stats.json."""
    timings = {}
    start = time.perf_counter()
    sources = write_documents(manifest, cache, out)
    timings["documents_s"] = time.perf_counter() - start

    start = time.perf_counter()
    train_files = sorted((out / "documents" / TRAIN).glob("*.jsonl"))
    n_train = sum(s[TRAIN]["documents"] for s in sources.values())
    print(f"training the tokenizer on {n_train:,} documents", flush=True)
    texts = progress(read_texts(train_files), total=n_train, desc="tokenizer", unit="doc")
    train_tokenizer(texts, out / "tokenizer", vocab_size=manifest.vocab_size, length=n_train)
    timings["tokenizer_s"] = time.perf_counter() - start

    shards_dir = out / "shards"
    if shards_dir.exists():
        shutil.rmtree(shards_dir)
    for split, seconds in prepare_shards(out, threads).items():
        timings[f"prepare_{split}_s"] = seconds
    for split in SPLITS:
        token_counts(out, split, sources)
    stats = {"heldout": manifest.heldout, "vocab_size": manifest.vocab_size, "threads": threads,
             "timings": timings, "totals": totals(sources), "sources": sources}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def totals(sources: dict) -> dict:
    """Documents, bytes and tokens per split and per kind ("prose"/"code"), with the prose share of tokens."""
    result = {}
    for split in SPLITS:
        row = {k: sum(s[split].get(k, 0) for s in sources.values()) for k in ("documents", "bytes", "tokens")}
        for kind in ("prose", "code"):
            row[f"{kind}_tokens"] = sum(s[split].get("tokens", 0) for s in sources.values() if s["kind"] == kind)
        row["prose_share"] = row["prose_tokens"] / max(row["tokens"], 1)
        result[split] = row
    return result
