"""study/lm/niah_answers.py: the shape, first-character and most-common shares of S-NIAH answers, counted on
hand-made records and read from gzipped evaluation folders, the committed ones included."""

import gzip
import json
import pathlib
import re

import pytest

from study.lm.niah_answers import (CHANCE, HEADROOM_LENGTHS, TASKS, first_word, graded_table, headroom_rows,
                                   headroom_table, main, read_graded, read_root, summarise, value_kind)

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results" / "lm"


def _record(pred, value, task="niah_single_2"):
    return {"task": task, "pred": pred, "outputs": [value], "score": float(value in pred)}


def test_value_kind_and_first_word():
    assert value_kind("7389470") == "number"
    assert value_kind("21f63b1a-c57d-4271-a6c3-0ff29dead885") == "uuid"
    assert first_word("5967.\n\nThe default is") == "5967"
    assert first_word("  ") == ""


def test_summary_counts_shape_first_character_and_the_most_common_answer():
    records = [_record("5967.", "5123456"), _record("5967. and more", "3123456"), _record("the sky", "1234567"),
               _record("88.", "8000000")]
    s = summarise(records, "run", "niah")
    assert (s.samples, s.shaped, s.first_char_right) == (4, 0.75, 0.5)
    assert (s.most_common, s.most_common_share, s.chance) == ("5967", 0.5, CHANCE["number"])


def test_uuid_answers_need_the_uuid_shape():
    value = "21f63b1a-c57d-4271-a6c3-0ff29dead885"
    s = summarise([_record("21f63b1a-c57d.", value, "niah_single_3"), _record("2167.", value, "niah_single_3")],
                  "run", "niah")
    assert (s.shaped, s.first_char_right, s.chance) == (0.5, 1.0, 1 / 16)


def test_refuses_no_records_and_mixed_value_kinds():
    with pytest.raises(ValueError, match="records: expected at least one"):
        summarise([], "run", "niah")
    with pytest.raises(ValueError, match="one kind of needle value"):
        summarise([_record("1", "1234567"), _record("1", "21f63b1a-c57d-4271-a6c3-0ff29dead885")], "run", "niah")


def test_reads_gzipped_folders_and_prints_a_row_each(tmp_path, capsys):
    folder = tmp_path / "gla-100m" / "niah_ccq_off"
    folder.mkdir(parents=True)
    with gzip.open(folder / "niah_single_1.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(_record(p, "7389470", "niah_single_1")) for p in ("7389470.", "the")) + "\n")
    [s] = read_root(tmp_path)
    assert (s.run, s.evaluation, s.task, s.shaped, s.first_char_right) == ("gla-100m", "niah_ccq_off",
                                                                           "niah_single_1", 0.5, 0.5)
    assert main([str(tmp_path)]) == 0
    assert "| gla-100m | niah_ccq_off | niah_single_1 | 2 | 50 % | 50 % | 11 % | `7389470` (50 %) |" in (
        capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "gla-100m")])


def test_an_exact_match_is_value_shaped_with_the_right_first_character():
    for value, task in (("7389470", "niah_single_1"), ("21f63b1a-c57d-4271-a6c3-0ff29dead885", "niah_single_3")):
        s = summarise([_record(f"{value}.", value, task)], "run", "niah")
        assert s.shaped == s.first_char_right == s.most_common_share == 1.0


def test_reads_every_committed_evaluation():
    summaries = read_root(RESULTS)
    assert {s.run for s in summaries} >= {"gla-100m-retrieval1600", "ccq-gla-100m-retrieval1600"}
    assert {s.samples for s in summaries} == {80}  # 4 lengths x 5 depths x 4 samples per task


def test_graded_records_are_read_apart_and_summarised_per_length(tmp_path, capsys):
    folder = tmp_path / "transformer-100m" / "niah"
    folder.mkdir(parents=True)
    with gzip.open(folder / "niah_single_1.jsonl.gz", "wt") as f:
        f.write(json.dumps(_record("the", "7389470", "niah_single_1")) + "\n")
    graded = [{"task": "niah_single_1", "length": n, "graded_score": g, "graded_top1": g == 1.0}
              for n, g in ((1024, 1.0), (1024, 0.5), (2048, 0.0))]
    with gzip.open(folder / "niah_single_1_graded.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in graded))
    assert [s.task for s in read_root(tmp_path)] == ["niah_single_1"]  # the graded file is not an answer file
    [(run, evaluation, task, summary)] = read_graded(tmp_path)
    assert (run, evaluation, task) == ("transformer-100m", "niah", "niah_single_1")
    assert summary["by_length"][1024]["graded_score"] == 0.75 and summary["graded_score"] == pytest.approx(0.5)
    assert "| transformer-100m | niah | niah_single_1 | 0.750 | 0.000 | 0.500 | 33 % | - | - |" in graded_table(
        read_graded(tmp_path))  # records from before the needle-free control: no control column value
    later = tmp_path / "transformer-100m-retrieval30000" / "niah"
    later.mkdir(parents=True)
    with gzip.open(later / "niah_single_1_graded.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r | {"control_score": c, "control_top1": False, "logprobs": [-1.0, -3.0, -4.0],
                                        "control_logprobs": [-2.0 - c, -3.0, -5.0]}) + "\n"
                        for r, c in zip(graded, (0.25, 0.5, 0.75))))
    # needle lifts: (-1 - (-2 - c)) - mean(0, 1) = 0.5 + c: 0.75, 1.0, 1.25, mean 1.0
    assert "| transformer-100m-retrieval30000 | niah | niah_single_1 | 0.750 | 0.000 | 0.500 | 33 % | 0.500 | 1.00 |" in (
        graded_table(read_graded(tmp_path)))
    assert main([str(tmp_path)]) == 0 and "graded at 2048" in capsys.readouterr().out


def _graded_summary(score, control, lift, lengths=HEADROOM_LENGTHS):
    cell = {"graded_score": score, "control_score": control, "needle_lift": lift}
    return {"by_length": {1024: dict(cell, graded_score=1.0), **{n: cell for n in lengths}}}


def test_the_headroom_score_is_the_mean_over_the_tasks_at_the_long_lengths():
    graded = [("ccq-gdn-100m-graded-seed0", "niah", task, _graded_summary(0.6 + 0.1 * i, 0.5, float(i)))
              for i, task in enumerate(TASKS)]  # 0.6, 0.7, 0.8 (1.0 at 1024, not counted)
    [(run, evaluation, score, control, lift)] = headroom_rows(graded)
    assert (run, evaluation) == ("ccq-gdn-100m-graded-seed0", "niah")
    assert (score, control, lift) == (pytest.approx(0.7), pytest.approx(0.5), pytest.approx(1.0))
    assert "| ccq-gdn-100m-graded-seed0 | niah | 0.700 | 0.500 | 1.00 |" in headroom_table(headroom_rows(graded))
    # an evaluation without every task, or a task without a long length or the control, has no row
    assert headroom_rows(graded[:2]) == []
    assert headroom_rows(graded[:2] + [graded[2][:3] + (_graded_summary(0.8, 0.5, 1.0, (4096,)),)]) == []
    no_control = {"by_length": {n: {"graded_score": 0.8} for n in HEADROOM_LENGTHS}}
    assert headroom_rows(graded[:2] + [graded[2][:3] + (no_control,)]) == []


def test_the_study_runs_every_task_the_headroom_figure_needs():
    run_sh = (pathlib.Path(__file__).resolve().parents[2] / "study" / "lm" / "run.sh").read_text()
    [tasks] = re.findall(r"--tasks (\S+)", run_sh)
    assert tuple(tasks.split(",")) == TASKS  # a task added to eval.niah without run.sh would drop every row


def test_the_headroom_table_of_the_committed_graded_control():
    rows = {(run, evaluation): score for run, evaluation, score, _, _ in headroom_rows(read_graded(RESULTS))}
    # gdn-100m-seed0-rerun (docs/results.md): 0.933 0.917 0.728 0.606 0.806 0.739 at 4K and 8K
    assert rows[("gdn-100m-seed0-rerun", "niah")] == pytest.approx(0.788, abs=5e-4)
