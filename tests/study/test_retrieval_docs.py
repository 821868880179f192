"""study/retrieval_docs.py: S-NIAH-format training documents, apart from the evaluation's prompts."""

import json
import re

import pytest

from ccq_jax.tokenizers import load_tokenizer
from eval import niah
from eval.models import TextTokenizer
from study import retrieval_docs
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


@pytest.mark.parametrize("task", list(niah.TASKS))
def test_dense_documents_hold_every_needle_and_every_answer_once(task):
    tok = load_tokenizer("byte")
    docs = retrieval_documents(tok, HAYSTACK, documents=4, seed=1, lengths=(2048,), needles=6)
    mine = [d for d in docs if f"/{task}/" in d["path"]]
    assert len(docs) == 2 * len(niah.TASKS) and len(mine) == 2  # per task and length, no depths
    kind, orders = niah.TASKS[task].type_needle_v, []
    for d in mine:
        text = d["text"]
        assert len(tok.encode(text)) <= 2048 and d["path"].startswith("retrieval-dense/")
        needles = re.findall(rf"One of the special magic {kind} for (\S+) is: (\S+)\.", text)
        answers = re.findall(rf"What is the special magic {kind[:-1]} for (\S+) mentioned in the provided text\? "
                             rf"The special magic {kind[:-1]} for \1 mentioned in the provided text is (\S+)\.", text)
        assert len(needles) == 6 and sorted(needles) == sorted(answers)  # each key asked once, answered right
        orders.append([k for k, _ in answers] != [k for k, _ in needles])
        assert text.index(answers[0][1] + ".") < text.index("What is")  # the needles are all in the haystack
        haystack = text[text.index("afterwards.\n") + 12:text.index("\nWhat is")]
        assert ("Word" in haystack) == (niah.TASKS[task].haystack == "essay")
    assert mine[0]["text"] != mine[1]["text"] and any(orders)  # the keys are asked in another order than written
    assert retrieval_documents(tok, HAYSTACK, documents=4, seed=1, lengths=(2048,), needles=6, workers=2) == docs


def test_dense_cells_are_split_into_jobs_that_do_not_change_the_documents(monkeypatch):
    tok = load_tokenizer("byte")
    whole = retrieval_documents(tok, HAYSTACK, documents=15, seed=2, lengths=(1024,), needles=2)
    monkeypatch.setattr(retrieval_docs, "DENSE_JOB", 2)  # each cell's 5 documents in jobs of 2, 2 and 1
    assert retrieval_documents(tok, HAYSTACK, documents=15, seed=2, lengths=(1024,), needles=2) == whole
    assert [d["path"].rsplit("/", 1)[1] for d in whole] == ["0", "1", "2", "3", "4"] * len(niah.TASKS)


def test_dense_documents_refuse_what_cannot_fit_by_name():
    tok = load_tokenizer("byte")
    with pytest.raises(ValueError, match=r"lengths: 512 tokens cannot hold 6 needles of niah_single_1"):
        retrieval_documents(tok, HAYSTACK, documents=1, seed=1, lengths=(512,), needles=6)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match=r"needles: expected a positive int"):
            retrieval_documents(tok, HAYSTACK, documents=1, seed=1, lengths=(2048,), needles=bad)
    with pytest.raises(ValueError, match=r"needles: expected at most"):
        retrieval_documents(tok, HAYSTACK, documents=1, seed=1, lengths=(2048,), needles=10**6)


def test_where_the_search_for_the_haystack_size_starts_changes_nothing():
    tok = TextTokenizer(load_tokenizer("byte"))
    docs = {start: retrieval_docs.dense_document(tok, HAYSTACK, "niah_single_2", 2048, 3, 4, 1, start=start)
            for start in (1, 64, 10_000)}
    assert docs[1] == docs[64] == docs[10_000] and docs[1][1] > 1


def test_cli_names_a_bad_needle_count_in_one_error_line(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (corpus / "documents" / "train").mkdir(parents=True)
    (corpus / "documents" / "train" / "python3.11-doc.jsonl").write_text(json.dumps({"text": HAYSTACK}) + "\n")
    with pytest.raises(SystemExit) as ended:
        main(["--corpus", str(corpus), "--documents", "3", "--tokenizer", "byte", "--needles", "0",
              "--out", str(tmp_path / "r.jsonl")])
    assert ended.value.code == 2 and not (tmp_path / "r.jsonl").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("error: needles: expected a positive int, got 0")
