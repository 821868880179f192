"""`ccq-prepare-data`: tokenise a corpus once into ArrayRecord shards (+ manifest.json) for training.

    ccq-prepare-data --source jsonl --paths data/*.jsonl --tokenizer byte --output prepared/
    ccq-prepare-data --source hf --hf-dataset ./my_saved_dataset --tokenizer tok/tokenizer.json --output prepared/

Train from the result with `source="array_record", paths=("prepared/",)` and the same
tokenizer. Documents keep the source's order (shuffling happens at training time); a
progress bar runs while tokenising and a summary (documents, tokens, shards) is printed. An
empty corpus, a file that is not UTF-8 (see `--encoding-errors`) or another user error ends with
one `ccq-prepare-data: error: ...` line and exit status 2 (`--debug`: the traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grain
from ccq_jax.cli import add_debug_flag, run_or_exit
from ccq_jax.documents import ENCODING_ERRORS
from ccq_jax.progress import progress as progress_bar

from train.data.config import BYTE_TOKENIZER, DataConfig
from train.data.shards import MANIFEST, ShardWriter
from train.data.sources import text_source
from ccq_jax.tokenizers import load_tokenizer

DOCS_PER_CALL = 64  # documents per tokenizer call
SOURCE_FIELDS = ("source", "paths", "text_field", "text_split", "hf_dataset", "hf_config", "hf_split")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccq-prepare-data", description=__doc__.split("\n")[0])
    p.add_argument("--source", required=True, choices=("text", "jsonl", "parquet", "hf"))
    p.add_argument("--paths", nargs="+", default=[], help="files, directories or globs (text, jsonl, parquet)")
    p.add_argument("--text-field", default="text", help="jsonl field / parquet or HF column holding the text")
    p.add_argument("--text-split", default="file", help="text source: 'file' (one document per file) or 'blank_line'")
    p.add_argument("--encoding-errors", default="strict", choices=ENCODING_ERRORS,
                   help="bytes that are not UTF-8 in text/jsonl files: fail naming the file, or replace or drop them")
    p.add_argument("--hf-dataset", default="", help="HF dataset: a save_to_disk directory or a cached hub name")
    p.add_argument("--hf-config", default=None)
    p.add_argument("--hf-split", default="train")
    p.add_argument("--tokenizer", default=BYTE_TOKENIZER, help="'byte' or the path of a tokenizer.json")
    p.add_argument("--bos-token", default=None)
    p.add_argument("--eos-token", default=None)
    p.add_argument("--output", required=True, help="directory for the shards and manifest.json")
    p.add_argument("--docs-per-shard", type=int, default=65536)
    p.add_argument("--threads", type=int, default=4, help="reader threads, each tokenising batches of documents")
    p.add_argument("--overwrite", action="store_true", help="replace shards already in --output")
    add_debug_flag(p)
    return p


def _clear_output(output: Path, overwrite: bool) -> None:
    old = [*output.glob("shard-*.array_record"), *output.glob(MANIFEST)] if output.is_dir() else []
    if old and not overwrite:
        raise ValueError(f"--output: {str(output)!r} already holds prepared shards; pass --overwrite to replace them")
    for path in old:
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    return run_or_exit(parser, lambda: _prepare(args), args.debug)


def _prepare(args: argparse.Namespace) -> int:
    if args.docs_per_shard < 1:
        raise ValueError(f"--docs-per-shard: must be >= 1, got {args.docs_per_shard}")
    config = DataConfig(
        source=args.source,
        paths=tuple(args.paths),
        text_field=args.text_field,
        text_split=args.text_split,
        encoding_errors=args.encoding_errors,
        hf_dataset=args.hf_dataset,
        hf_config=args.hf_config,
        hf_split=args.hf_split,
        tokenizer=args.tokenizer,
        bos_token=args.bos_token,
        eos_token=args.eos_token,
        read_threads=args.threads,
    )
    output = Path(args.output)
    _clear_output(output, args.overwrite)
    tokenizer = load_tokenizer(config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token)
    documents = grain.MapDataset.source(text_source(config))
    writer = ShardWriter(
        output, num_documents=len(documents), docs_per_shard=args.docs_per_shard, tokenizer_spec=tokenizer.spec
    )
    # a batch of documents per `encode_batch` call: HF tokenizers encode it on all cores, where single `encode`
    # calls hold the GIL (one core, whatever the number of threads)
    read = grain.ReadOptions(num_threads=args.threads, prefetch_buffer_size=4 * args.threads)
    batches = documents.batch(DOCS_PER_CALL, batch_fn=list).map(tokenizer.encode_batch).to_iter_dataset(read)
    with progress_bar(total=len(documents), desc="tokenising", unit="doc") as bar:
        for batch in batches:
            for tokens in batch:
                writer.write(tokens)
            bar.update(len(batch))
    source = {key: value for key, value in config.to_dict().items() if key in SOURCE_FIELDS}
    manifest = writer.close(source)
    mean = manifest["tokens"] / max(manifest["documents"], 1)
    print(
        f"ccq-prepare-data: {manifest['documents']:,} documents, {manifest['tokens']:,} tokens "
        f"({mean:.1f} per document), {len(manifest['shards'])} shards -> {output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
