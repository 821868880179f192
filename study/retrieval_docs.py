"""S-NIAH-format training documents: an optional synthetic retrieval share for the language-modelling study.

    python -m study.retrieval_docs --corpus CORPUS --documents 1600 --out CORPUS/documents/retrieval/niah.jsonl

Each document is one prompt of `eval.niah`'s three single-needle tasks followed by its answer, so a
model trained on them has seen the task's format. What keeps them apart from the evaluation's prompts:
- another seed (`--seed`, default 1; the evaluation uses 42), so keys and values are drawn afresh;
- the essay tasks' haystack is text of the corpus's own training split (the first documents of
  `HAYSTACK_PACKAGE`), not the evaluation's built-in essay;
- the lengths are the training context's (512, 1024 and 2048 tokens), the evaluation's go to 8K.

The needle template, the noise haystack of niah_single_1 and the key vocabulary are the evaluation's
own: this share teaches the format, and the docs that report results with it must say so. At the
default 1,600 documents it is about 1.9M tokens, 2 % of the 95.9M-token training pack.
"""

import argparse
import contextlib
import json
import math
import multiprocessing
import pathlib
import tempfile
from concurrent.futures import ProcessPoolExecutor

from ccq_jax.progress import progress as progress_bar
from ccq_jax.tokenizers import load_tokenizer
from eval import niah
from eval.models import TextTokenizer

LENGTHS = (512, 1024, 2048)
HAYSTACK_PACKAGE = "python3.11-doc"
HAYSTACK_WORDS = 200_000
ANSWER_ROOM = 48  # tokens left after the prompt for " {value}." (a uuid is 38 bytes)


def haystack_text(corpus: pathlib.Path, words: int = HAYSTACK_WORDS) -> str:
    """The first `words` words of the training split's HAYSTACK_PACKAGE documents, in their order."""
    path = corpus / "documents" / "train" / f"{HAYSTACK_PACKAGE}.jsonl"
    if not path.is_file():
        raise ValueError(f"corpus: {str(path)!r} does not exist (expected an unpacked corpus, docs/corpus.md)")
    taken = []
    with path.open() as f:
        for line in f:
            taken.extend(json.loads(line)["text"].split())
            if len(taken) >= words:
                break
    return " ".join(taken[:words])


def _cell_documents(tokenizer, essays: str, task: str, length: int, depth: int, per_cell: int, seed: int) -> list:
    """The documents of one (task, length, depth) cell, in `niah.generate_samples`'s index order."""
    samples = niah.generate_samples(task, TextTokenizer(tokenizer), lengths=(length,), depths=(depth,),
                                    num_samples=per_cell, seed=seed, tokens_to_generate=ANSWER_ROOM,
                                    essay_dir=essays, progress=False)
    return [{"text": f"{s.prompt} {s.outputs[0]}.", "source": "retrieval",
             "path": f"retrieval/{task}/{s.length}/{s.depth}/{s.index}"} for s in samples]


def retrieval_documents(tokenizer, haystack: str, documents: int, seed: int, lengths=LENGTHS,
                        progress: bool = False, workers: int = 1) -> list[dict]:
    """About `documents` training documents (a whole number per task, length and depth): prompt + answer.

    Each sample's needle is drawn from its own (seed, task, length, depth, index), so the cells are made apart,
    by `workers` processes where more than one, and the documents do not depend on `workers`."""
    if documents < 1:
        raise ValueError(f"documents: expected >= 1, got {documents}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    cells = [(task, length, depth) for task in niah.TASKS for length in lengths for depth in niah.DEFAULT_DEPTHS]
    per_cell = math.ceil(documents / len(cells))
    with contextlib.ExitStack() as stack:
        essays = stack.enter_context(tempfile.TemporaryDirectory())  # the haystack, written once for every cell
        (pathlib.Path(essays) / "haystack.txt").write_text(haystack, encoding="utf-8")
        jobs = [(tokenizer, essays, task, length, depth, per_cell, seed) for task, length, depth in cells]
        pool = None if workers == 1 else stack.enter_context(
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")))
        made = (map if pool is None else pool.map)(_cell_documents, *zip(*jobs))
        return [d for docs in progress_bar(made, total=len(jobs), desc="cells", disable=not progress) for d in docs]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, type=pathlib.Path, help="an unpacked corpus (docs/corpus.md)")
    p.add_argument("--documents", type=int, default=1600)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lengths", type=lambda t: tuple(int(x) for x in t.split(",")), default=LENGTHS,
                   help="prompt lengths in tokens, answer included")
    p.add_argument("--tokenizer", default=None, help="default: the corpus's tokenizer/tokenizer.json")
    p.add_argument("--out", required=True, type=pathlib.Path, help="JSON lines, one document each")
    p.add_argument("--workers", type=int, default=1, help="processes making the (task, length, depth) cells")
    a = p.parse_args(argv)
    tokenizer = load_tokenizer(a.tokenizer or str(a.corpus / "tokenizer" / "tokenizer.json"))
    docs = retrieval_documents(tokenizer, haystack_text(a.corpus), a.documents, a.seed, a.lengths, progress=True,
                               workers=a.workers)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(d) + "\n" for d in docs))
    tokens = sum(len(tokenizer.encode(d["text"])) for d in docs)
    print(f"retrieval_docs: {len(docs)} documents, {tokens:,} tokens -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
