"""CLI for the Debian corpus: `build` it, `pack` it into one small file, `unpack` that file elsewhere.

    python -m study.debian_corpus build --out /work/corpus/build
    python -m study.debian_corpus pack --corpus /work/corpus/build --out corpus.tar.xz --max-mib 45
    python -m study.debian_corpus unpack corpus.tar.xz --out /data/corpus --threads 16

`build` downloads the packages pinned in `study/corpus_manifest.json` (cached in --cache,
sha256-checked), writes documents, tokenizer, shards and stats.json (see `study.build`) and
prints a table of documents, MB and tokens per source. docs/corpus.md describes the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from study.build import build
from study.manifest import MANIFEST, load_manifest
from study.pack import pack, unpack
from study.split import SPLITS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m study.debian_corpus", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download, extract, split, train the tokenizer, write shards and stats")
    b.add_argument("--out", required=True, help="output directory")
    b.add_argument("--cache", default=None, help="directory for the .deb files (default: OUT/debs)")
    b.add_argument("--manifest", default=str(MANIFEST))
    b.add_argument("--threads", type=int, default=1, help="ccq-prepare-data tokenizer threads")
    k = sub.add_parser("pack", help="documents (xz -9) + tokenizer in one file of at most --max-mib")
    k.add_argument("--corpus", required=True, help="a `build` output directory")
    k.add_argument("--out", required=True, help="the .tar.xz to write")
    k.add_argument("--max-mib", type=float, default=45.0)
    k.add_argument("--fraction", type=float, default=None, help="training subset to pack (default: largest that fits)")
    u = sub.add_parser("unpack", help="extract a pack and write its shards with ccq-prepare-data")
    u.add_argument("file")
    u.add_argument("--out", required=True)
    u.add_argument("--threads", type=int, default=4)
    return p


def table(stats: dict) -> str:
    """A markdown table of documents, MB and tokens per source (train + held-out) and the totals."""
    rows = ["| source | version | kind | documents | MB | tokens (M) | held-out docs |",
            "|---|---|---|---:|---:|---:|---:|"]
    for name, s in stats["sources"].items():
        docs = sum(s[split]["documents"] for split in SPLITS)
        mb = sum(s[split]["bytes"] for split in SPLITS) / 1e6
        tokens = sum(s[split].get("tokens", 0) for split in SPLITS) / 1e6
        rows.append(f"| {name} | {s['version']} | {s['kind']} | {docs:,} | {mb:.1f} | {tokens:.2f} | "
                    f"{s['heldout']['documents']:,} |")
    for split, t in stats["totals"].items():
        rows.append(f"| **{split}** | | prose {t['prose_share']:.1%} | {t['documents']:,} | {t['bytes'] / 1e6:.1f} | "
                    f"{t['tokens'] / 1e6:.2f} | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        if args.command == "build":
            if args.threads < 1:
                raise ValueError(f"--threads: must be >= 1, got {args.threads}")
            out = Path(args.out)
            cache = Path(args.cache) if args.cache else out / "debs"
            stats = build(load_manifest(args.manifest), out, cache, threads=args.threads)
            print(table(stats))
        elif args.command == "pack":
            info = pack(Path(args.corpus), Path(args.out), max_mib=args.max_mib, fraction=args.fraction)
            print(json.dumps(info))
        else:
            seconds = unpack(Path(args.file), Path(args.out), threads=args.threads)
            took = ", ".join(f"{split} {s:.0f} s" for split, s in seconds.items())
            print(f"unpack: shards written to {args.out}/shards ({took})")
    except ValueError as e:
        parser.error(str(e))
    print(f"{args.command}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
