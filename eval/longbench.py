"""LongBench (v1): greedy predictions from local data files, and scoring with LongBench's `eval.py` conventions.

Data: LongBench's `data.zip` (or `load_dataset("THUDM/LongBench", name)` saved as JSONL): one
`{dataset}.jsonl` per task, records with `input`, `context`, `answers`, `length`,
`all_classes`, `_id`. Prompts and generation lengths come from LongBench's
`config/dataset2prompt.json` and `config/dataset2maxlen.json` (pass their contents).

Predictions follow LongBench's `pred.py`: prompt = `prompt_format.format(**record)`; a prompt
longer than `max_length` tokens keeps its first and last `max_length // 2` tokens (decoded and
re-joined: "truncate in the middle"); greedy decoding; no chat template (base models).
Prediction files hold LongBench's records `{"pred", "answers", "all_classes", "length"}` (plus
`_id`), one `{dataset}.jsonl` per task in a folder.

Scoring follows `eval.py`: for trec/triviaqa/samsum/lsht only the first line of the prediction
(after leading newlines) is scored; a prediction's score is the max over its answers; a task's
score is the mean x 100 rounded to 2 decimals. `PAPER_TASKS` are the 14 English tasks the GLA /
Gated DeltaNet / CCQ papers average.
"""

from pathlib import Path

import numpy as np
from ccq_jax.progress import progress as progress_bar

from ccq_jax import checks as check
from eval.longbench_metrics import (
    classification_score,
    code_sim_score,
    count_score,
    qa_f1_score,
    qa_f1_zh_score,
    retrieval_score,
    retrieval_zh_score,
    rouge_score,
    rouge_zh_score,
)
from eval.protocols import GenerateFn, Tokenizer, check_tokenizer, cut_at_eos
from eval.records import read_jsonl

DATASET2METRIC = {
    "narrativeqa": qa_f1_score,
    "qasper": qa_f1_score,
    "multifieldqa_en": qa_f1_score,
    "multifieldqa_zh": qa_f1_zh_score,
    "hotpotqa": qa_f1_score,
    "2wikimqa": qa_f1_score,
    "musique": qa_f1_score,
    "dureader": rouge_zh_score,
    "gov_report": rouge_score,
    "qmsum": rouge_score,
    "multi_news": rouge_score,
    "vcsum": rouge_zh_score,
    "trec": classification_score,
    "triviaqa": qa_f1_score,
    "samsum": rouge_score,
    "lsht": classification_score,
    "passage_retrieval_en": retrieval_score,
    "passage_count": count_score,
    "passage_retrieval_zh": retrieval_zh_score,
    "lcc": code_sim_score,
    "repobench-p": code_sim_score,
}
FIRST_LINE_DATASETS = ("trec", "triviaqa", "samsum", "lsht")
PAPER_TASKS = (
    "narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique",
    "gov_report", "qmsum", "multi_news", "trec", "triviaqa", "samsum", "lcc", "repobench-p",
)  # fmt: skip


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASET2METRIC:
        raise ValueError(f"dataset: expected one of {sorted(DATASET2METRIC)}, got {dataset!r}")


def score_prediction(dataset: str, prediction: str, answers: list[str], all_classes=None) -> float:
    """One prediction's score in [0, 1]: the task's metric, max over the answers (first line for few-shot tasks)."""
    _check_dataset(dataset)
    if dataset in FIRST_LINE_DATASETS:
        prediction = prediction.lstrip("\n").split("\n")[0]
    metric = DATASET2METRIC[dataset]
    return max([0.0, *(metric(prediction, answer, all_classes=all_classes) for answer in answers)])


def score_dataset(dataset: str, records: list[dict]) -> float:
    """A task's score: mean over `{"pred", "answers", "all_classes"}` records x 100, rounded to 2 decimals."""
    if not records:
        raise ValueError(f"records: expected at least one prediction record for {dataset}, got none")
    scores = [score_prediction(dataset, r["pred"], r["answers"], r.get("all_classes")) for r in records]
    return round(100 * float(np.mean(scores)), 2)


def _with_answers(pred_records: list[dict], data_file: Path | None, where: str) -> list[dict]:
    if all("answers" in r for r in pred_records):
        return pred_records
    if data_file is None or not data_file.is_file():
        raise ValueError(
            f"data_dir: {where} has records without 'answers'; they are joined by '_id' with the LongBench data "
            f"file, which was not found ({data_file})"
        )
    by_id = {r["_id"]: r for r in read_jsonl(data_file)}
    missing = [r.get("_id") for r in pred_records if r.get("_id") not in by_id]
    if missing:
        raise ValueError(
            f"pred_dir: {where} has {len(missing)} predictions with no matching '_id' in {data_file}, "
            f"e.g. {missing[0]!r}"
        )
    return [by_id[r["_id"]] | {"pred": r["pred"]} for r in pred_records]


def score_predictions(pred_dir, *, data_dir=None, datasets=PAPER_TASKS) -> dict:
    """Scores of the `{dataset}.jsonl` prediction files in `pred_dir` and their average.

    Records without `answers` are completed from `data_dir/{dataset}.jsonl` by `_id`.
    Returns `{"scores": {dataset: score}, "average": mean of the scores}`.
    """
    pred_dir = Path(pred_dir)
    for d in datasets:
        _check_dataset(d)
    missing = [d for d in datasets if not (pred_dir / f"{d}.jsonl").is_file()]
    if missing:
        raise ValueError(f"pred_dir: {pred_dir} lacks predictions for {missing}")
    scores = {}
    for d in datasets:
        data_file = Path(data_dir) / f"{d}.jsonl" if data_dir is not None else None
        scores[d] = score_dataset(d, _with_answers(read_jsonl(pred_dir / f"{d}.jsonl"), data_file, f"{d}.jsonl"))
    return {"scores": scores, "average": round(float(np.mean(list(scores.values()))), 2)}


def truncate_middle(tokenizer: Tokenizer, prompt: str, max_length: int) -> list[int]:
    """LongBench's middle truncation: a prompt over `max_length` tokens keeps the decoded first and last halves."""
    check.integer("max_length", max_length, minimum=2)  # below 2 the halves are empty and ids[-0:] is everything
    ids = tokenizer.encode(prompt)
    if len(ids) <= max_length:
        return ids
    half = max_length // 2
    return tokenizer.encode(tokenizer.decode(ids[:half]) + tokenizer.decode(ids[-half:]))


def predict_dataset(
    records: list[dict],
    generate_fn: GenerateFn,
    tokenizer: Tokenizer,
    *,
    prompt_format: str,
    max_new_tokens: int,
    max_length: int,
    batch_size: int = 1,
    progress: bool = True,
) -> list[dict]:
    """Greedy predictions for LongBench records, as `pred.py` writes them.

    Returns records `{"pred", "answers", "all_classes", "length", "_id"}`; prompt_format and
    max_new_tokens: the task's entries of LongBench's dataset2prompt.json / dataset2maxlen.json.
    """
    check_tokenizer(tokenizer)
    prompts = [truncate_middle(tokenizer, prompt_format.format(**r), max_length) for r in records]
    out = []
    for first in progress_bar(range(0, len(records), batch_size), desc="longbench generate", disable=not progress):
        gens = generate_fn(prompts[first : first + batch_size], max_new_tokens)
        for r, g in zip(records[first : first + batch_size], gens):
            out.append(
                {
                    "pred": tokenizer.decode(cut_at_eos(list(g), tokenizer.eos_id)),
                    "answers": r["answers"],
                    "all_classes": r.get("all_classes"),
                    "length": r.get("length"),
                    "_id": r.get("_id"),
                }
            )
    return out
