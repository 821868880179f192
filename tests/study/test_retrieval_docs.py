"""study/retrieval_docs.py: S-NIAH-format training documents, apart from the evaluation's prompts."""

import json

import pytest

from ccq_jax.tokenizers import load_tokenizer
from eval import niah
from study.retrieval_docs import haystack_text, main, retrieval_documents

HAYSTACK = " ".join(f"Word{i} of the manual describes option {i}." for i in range(3000))
LENGTHS = (1024, 2048)  # byte-level tokens: 512 cannot hold the uuid task's template


def test_documents_hold_a_prompt_and_its_answer_within_the_training_lengths():
    tok = load_tokenizer("byte")
    docs = retrieval_documents(tok, HAYSTACK, documents=66, seed=1, lengths=LENGTHS)
    cells = len(niah.TASKS) * len(LENGTHS) * len(niah.DEFAULT_DEPTHS)
    assert len(docs) == cells  # one document per task, length and depth
    for d in docs:
        question, answer = d["text"].rsplit(" ", 1)
        assert "What is the special magic" in question and answer.endswith(".")
        assert answer[:-1] in question  # the needle's value is in the haystack
        assert len(tok.encode(d["text"])) <= max(LENGTHS)
    essay = [d["text"] for d in docs if "/niah_single_2/" in d["path"]]
    assert essay and all("Word" in t and niah.NOISE not in t for t in essay)  # the given haystack, not the noise


def test_another_seed_draws_other_needles_than_the_evaluations():
    tok = load_tokenizer("byte")
    train = {d["text"].rsplit(" ", 1)[1] for d in retrieval_documents(tok, HAYSTACK, documents=66, seed=1,
                                                                       lengths=LENGTHS)}
    evaluation = niah.generate_samples("niah_single_1", tok, lengths=LENGTHS, num_samples=1, seed=42, progress=False)
    assert not train & {s.outputs[0] + "." for s in evaluation}


def test_cli_reads_the_corpus_haystack_and_says_what_is_missing(tmp_path):
    corpus = tmp_path / "corpus"
    with pytest.raises(ValueError, match=r"corpus: .*python3.11-doc.jsonl' does not exist"):
        haystack_text(corpus)
    (corpus / "documents" / "train").mkdir(parents=True)
    (corpus / "documents" / "train" / "python3.11-doc.jsonl").write_text(json.dumps({"text": HAYSTACK}) + "\n")
    assert haystack_text(corpus, words=5) == "Word0 of the manual describes"
    out = tmp_path / "r.jsonl"
    assert main(["--corpus", str(corpus), "--documents", "3", "--tokenizer", "byte", "--lengths", "1024,2048",
                 "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == len(niah.TASKS) * len(LENGTHS) * len(niah.DEFAULT_DEPTHS)


def test_workers_make_the_same_documents_and_bad_counts_are_named():
    tok = load_tokenizer("byte")
    one = retrieval_documents(tok, HAYSTACK, documents=70, seed=3, lengths=LENGTHS)
    assert retrieval_documents(tok, HAYSTACK, documents=70, seed=3, lengths=LENGTHS, workers=2) == one
    assert len({d["text"] for d in one}) == len(one)  # the second sample of a cell is another draw
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"workers: expected a positive int"):
            retrieval_documents(tok, HAYSTACK, documents=3, seed=1, lengths=LENGTHS, workers=bad)
