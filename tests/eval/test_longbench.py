"""LongBench metrics on hand-computed cases, LongBench's eval.py conventions, file scoring and prediction, and
errors naming the bad argument (or the missing package)."""

import json
import sys

import pytest

from eval.longbench import (
    DATASET2METRIC,
    PAPER_TASKS,
    predict_dataset,
    score_dataset,
    score_prediction,
    score_predictions,
    truncate_middle,
)
from eval.longbench_metrics import (
    classification_score,
    code_sim_score,
    count_score,
    fuzz_ratio,
    qa_f1_score,
    qa_f1_zh_score,
    retrieval_score,
    rouge_score,
)
from eval.records import write_jsonl
from tests.eval.toy import ByteTokenizer


def test_qa_f1():
    # "eiffel tower paris" vs "eiffel tower": 2 shared tokens, P = 2/3, R = 1
    assert qa_f1_score("The Eiffel Tower, Paris!", "eiffel tower") == pytest.approx(0.8)
    assert qa_f1_score("an apple", "the banana") == 0.0
    assert qa_f1_score("x b b", "b b c") == pytest.approx(2 / 3)
    assert qa_f1_score("a b b", "b b c") == pytest.approx(0.8)  # "a" is an article: "b b" vs "b b c"


def test_rouge_l_as_the_rouge_package_computes_it():
    # one sentence each; LCS "the cat on the mat" counted on distinct words {the, cat, on, mat} = 4 of 5 and 5
    assert rouge_score("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.8, abs=1e-7)
    # sentences split on ".": union LCS 5 words; 6 distinct reference words, 5 distinct predicted ones
    assert rouge_score("a b. c d e", "a c. d b e f") == pytest.approx(10 / 11, abs=1e-7)
    assert rouge_score("", "reference") == 0.0


def test_classification_keeps_longbench_behaviour():
    classes = ["Location", "Human", "Entity"]
    assert classification_score("Location", "Location", all_classes=classes) == 1.0
    assert classification_score("Location or Human", "Human", all_classes=classes) == 0.5
    assert classification_score("no idea", "Human", all_classes=classes) == 0.0
    # the removal while iterating skips "ab": the match list ends as ["ab", "abc"]
    assert classification_score("abc", "abc", all_classes=["a", "ab", "abc"]) == 0.5


def test_retrieval_count_and_code():
    assert retrieval_score("Paragraph 3, or maybe 3 or 12", "Paragraph 3") == pytest.approx(2 / 3)
    assert retrieval_score("no number", "Paragraph 3") == 0.0
    with pytest.raises(ValueError, match=r"ground_truth: expected an answer matching 'Paragraph .*', got '3'"):
        retrieval_score("1", "3")
    assert count_score("There are 5 unique paragraphs out of 10", 5) == 0.5
    # first line without ` # //: "x = foo(1)"; 9 of 10 characters match: 2 * 9 / 20
    assert code_sim_score("```python\n# comment\nx = foo(1)\ny", "x = foo(2)") == pytest.approx(0.9)
    assert code_sim_score("// only comments", "x") == 0.0
    assert fuzz_ratio("same", "same") == 100 and fuzz_ratio("", "x") == 0


def test_chinese_metrics_without_jieba_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"Chinese LongBench metrics .* need jieba: pip install jieba"):
        qa_f1_zh_score("北京", "北京")


def test_chinese_metrics_with_jieba():
    pytest.importorskip("jieba")
    assert qa_f1_zh_score("北京。", "北京") == 1.0


def test_eval_py_conventions():
    assert len(PAPER_TASKS) == 14 and set(PAPER_TASKS) <= set(DATASET2METRIC)
    assert score_prediction("trec", "\nLocation\nHuman", ["Location"], ["Location", "Human"]) == 1.0
    assert score_prediction("hotpotqa", "Paris", ["London", "paris"]) == 1.0
    records = [{"pred": "x y", "answers": ["x y"]}, {"pred": "x", "answers": ["z"]}, {"pred": "x", "answers": ["x y"]}]
    assert score_dataset("hotpotqa", records) == round(100 * (1 + 0 + 2 / 3) / 3, 2) == 55.56
    with pytest.raises(ValueError, match=r"dataset: expected one of \['2wikimqa', .*\], got 'hotpot'"):
        score_prediction("hotpot", "x", ["x"])
    with pytest.raises(ValueError, match=r"records: expected at least one prediction record for hotpotqa, got none"):
        score_dataset("hotpotqa", [])


def test_score_prediction_files(tmp_path):
    pred, data = tmp_path / "pred", tmp_path / "data"
    write_jsonl(pred / "hotpotqa.jsonl", [{"pred": "Paris", "answers": ["Paris"], "all_classes": None}])
    write_jsonl(data / "trec.jsonl", [{"_id": "q1", "answers": ["Human"], "all_classes": ["Human", "Location"]}])
    write_jsonl(pred / "trec.jsonl", [{"_id": "q1", "pred": "Location"}])
    out = score_predictions(pred, data_dir=data, datasets=("hotpotqa", "trec"))
    assert out == {"scores": {"hotpotqa": 100.0, "trec": 0.0}, "average": 50.0}
    json.dumps(out)
    with pytest.raises(ValueError, match=r"pred_dir: .*pred lacks predictions for \['qasper'\]"):
        score_predictions(pred, datasets=("hotpotqa", "qasper"))
    with pytest.raises(ValueError, match=r"dataset: expected one of .*, got 'hotpot'"):
        score_predictions(pred, datasets=("hotpot",))
    with pytest.raises(ValueError, match=r"data_dir: trec.jsonl has records without 'answers'; they are joined by '_id' "
                                         r"with the LongBench data file, which was not found \(None\)"):
        score_predictions(pred, datasets=("trec",))
    write_jsonl(pred / "trec.jsonl", [{"_id": "q9", "pred": "Location"}])
    with pytest.raises(ValueError, match=r"pred_dir: trec.jsonl has 1 predictions with no matching '_id' in "
                                         r".*trec.jsonl, e.g. 'q9'"):
        score_predictions(pred, data_dir=data, datasets=("trec",))
    write_jsonl(pred / "trec.jsonl", [])  # an empty prediction file
    with pytest.raises(ValueError, match=r"records: expected at least one prediction record for trec, got none"):
        score_predictions(pred, data_dir=data, datasets=("trec",))


def test_truncate_middle_and_predict():
    tok = ByteTokenizer()
    assert tok.decode(truncate_middle(tok, "abcdefghij", 4)) == "abij"
    assert tok.decode(truncate_middle(tok, "abc", 4)) == "abc"
    seen = []

    def generate(prompts, max_new_tokens):
        seen.extend((tok.decode(p), max_new_tokens) for p in prompts)
        return [tok.encode(" answer") + [tok.eos_id, 70] for _ in prompts]

    records = [{"context": "0123456789", "input": "q?", "answers": ["a"], "length": 3, "_id": str(i), "all_classes": None} for i in range(3)]
    out = predict_dataset(records, generate, tok, prompt_format="{context}|{input}", max_new_tokens=5, max_length=6, batch_size=2, progress=False)
    assert seen == [("012|q?", 5)] * 3
    assert [r["pred"] for r in out] == [" answer"] * 3 and out[2]["_id"] == "2" and out[0]["answers"] == ["a"]


@pytest.mark.parametrize("max_length", [0, 1])
def test_prompts_need_room_for_both_halves(max_length):
    """Below 2 tokens the halves are empty, and ids[-0:] would keep the whole prompt."""
    tok = ByteTokenizer()
    records = [{"context": "0123456789", "input": "q?", "answers": ["a"], "_id": "0"}]
    with pytest.raises(ValueError, match=rf"max_length: expected an integer >= 2, got {max_length}"):
        predict_dataset(records, lambda prompts, n: [[] for _ in prompts], tok, prompt_format="{context}|{input}",
                        max_new_tokens=5, max_length=max_length, progress=False)
