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

`--needles K` (K > 1) makes denser documents instead: K needles (distinct keys) at random sentence
boundaries of one haystack, then every key queried once in a shuffled order, each question (the
evaluation's) followed by its answer prefix and value: K supervised answers a document where the
S-NIAH format has one, and a lookup the format alone cannot answer (the 30,000-document mix of
K = 1 taught a 100M Transformer the answer's format, not the lookup: docs/results.md). The first
question is the evaluation's prompt ending; the header keeps its singular wording. With the corpus's
tokenizer 512 tokens hold at most 4 UUID needles and their answers (a larger K needs `--lengths`
without 512); 900 documents of K = 4 take 23 s on one core (1.07M tokens).
"""

import argparse
import contextlib
import json
import math
import multiprocessing
import pathlib
import random
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


def dense_document(tokenizer, haystack: str, task: str, length: int, index: int, needles: int, seed: int,
                   start: int = niah.UNITS_GUESS) -> tuple[dict, int]:
    """One document of `needles` needles in a haystack of `task`'s kind, then each key's question and answer (the
    module docstring), as many haystack units as fit in `length` tokens of `tokenizer` (a `TextTokenizer`), and
    that number of units: the search for it starts at `start` (the cell's previous document's, which is close)."""
    spec = niah.TASKS[task]
    rng = random.Random(f"dense:{seed}:{task}:{length}:{index}")
    keys = rng.sample(niah.KEYS, needles)
    values = [niah.needle_value(spec, rng) for _ in keys]
    sentences = [spec.needle(k, v) for k, v in zip(keys, values)]
    depths = sorted(rng.random() for _ in keys)
    asked = rng.sample(range(needles), needles)
    answers = "".join(f"{spec.question(keys[i])} {values[i]}." for i in asked)
    words = haystack.split(" ")

    def text(n: int) -> str:
        units = niah.haystack_units(spec, words, n)
        slots = [int(len(units) * depth) for depth in depths]  # boundaries of the haystack alone, ascending
        for j, (slot, sentence) in enumerate(zip(slots, sentences)):
            units.insert(slot + j, sentence)
        return spec.header + spec.separator.join(units) + answers

    n = niah.largest_fitting(lambda n: len(tokenizer.encode(text(n))) <= length, start)
    if n == 0:
        raise ValueError(f"lengths: {length} tokens cannot hold {needles} needles of {task} and their answers")
    return {"text": text(n), "source": "retrieval", "path": f"retrieval-dense/{task}/{length}/{index}"}, n


DENSE_JOB = 50  # dense documents a job makes: a cell's documents split over the workers, the same for any number


def _dense_documents(tokenizer, haystack: str, task: str, length: int, first: int, count: int, needles: int,
                     seed: int) -> list:
    docs, units, text_tokenizer = [], niah.UNITS_GUESS, TextTokenizer(tokenizer)
    for i in range(first, first + count):
        doc, units = dense_document(text_tokenizer, haystack, task, length, i, needles, seed, start=units)
        docs.append(doc)
    return docs


def retrieval_documents(tokenizer, haystack: str, documents: int, seed: int, lengths=LENGTHS,
                        progress: bool = False, workers: int = 1, needles: int = 1) -> list[dict]:
    """About `documents` training documents (a whole number per task, length and depth; with `needles` > 1, per
    task and length, `dense_document`'s): prompt + answer.

    Each sample's needles are drawn from its own (seed, task, length, depth or not, index), so the cells are made
    apart, by `workers` processes where more than one, and the documents do not depend on `workers`."""
    if documents < 1:
        raise ValueError(f"documents: expected >= 1, got {documents}")
    for name, value in (("workers", workers), ("needles", needles)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if needles > len(niah.KEYS):
        raise ValueError(f"needles: expected at most {len(niah.KEYS)} (the distinct keys), got {needles}")
    with contextlib.ExitStack() as stack:
        if needles == 1:
            cells = [(t, n, d) for t in niah.TASKS for n in lengths for d in niah.DEFAULT_DEPTHS]
            per_cell = math.ceil(documents / len(cells))
            essays = stack.enter_context(tempfile.TemporaryDirectory())  # the haystack, written once for every cell
            (pathlib.Path(essays) / "haystack.txt").write_text(haystack, encoding="utf-8")
            make, jobs = _cell_documents, [(tokenizer, essays, t, n, d, per_cell, seed) for t, n, d in cells]
        else:
            cells = [(t, n) for t in niah.TASKS for n in lengths]
            per_cell = math.ceil(documents / len(cells))
            make, jobs = _dense_documents, [(tokenizer, haystack, t, n, i, min(DENSE_JOB, per_cell - i), needles, seed)
                                            for t, n in cells for i in range(0, per_cell, DENSE_JOB)]
        pool = None if workers == 1 else stack.enter_context(
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")))
        made = (map if pool is None else pool.map)(make, *zip(*jobs))
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
    p.add_argument("--needles", type=int, default=1,
                   help="needles and questions a document (default 1: the S-NIAH format; more: dense documents)")
    a = p.parse_args(argv)
    tokenizer = load_tokenizer(a.tokenizer or str(a.corpus / "tokenizer" / "tokenizer.json"))
    try:
        docs = retrieval_documents(tokenizer, haystack_text(a.corpus), a.documents, a.seed, a.lengths,
                                   progress=True, workers=a.workers, needles=a.needles)
    except ValueError as e:
        p.error(str(e))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(d) + "\n" for d in docs))
    tokens = sum(len(tokenizer.encode(d["text"])) for d in docs)
    print(f"retrieval_docs: {len(docs)} documents, {tokens:,} tokens -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
