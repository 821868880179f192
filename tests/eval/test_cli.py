"""`ccq-eval`: every subcommand end to end on tiny random models (1 layer, tiny lengths), `--ccq off`, and
errors that name the argument (exit status 2, the message on stderr)."""

import functools
import json
import sys

import pytest

from eval.__main__ import main
from eval.builtin_text import DECLARATION_OF_INDEPENDENCE, GETTYSBURG_ADDRESS
from eval.records import read_jsonl, write_jsonl

TINY = ["--set", "num_hidden_layers=1", "--no-progress"]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    write_jsonl(path, [{"text": GETTYSBURG_ADDRESS}, {"text": DECLARATION_OF_INDEPENDENCE}])
    return path


def _run(command, out, *args):
    main([command, *args, "--out", str(out), *TINY])
    return json.loads((out / f"{command.replace('-', '_')}.json").read_text())


def _png(path):
    return path.read_bytes()[:4] == b"\x89PNG"


def test_ppl_and_the_ccq_ablation(docs, tmp_path):
    """--ccq off changes a CCQ model's perplexity and gives exactly the backbone's (same seed, same weights)."""
    args = ("--data", str(docs), "--limit", "1", "--window", "32", "--batch-size", "4")
    on = _run("ppl", tmp_path / "on", "--preset", "ccq-gla-tiny", *args)
    off = _run("ppl", tmp_path / "off", "--preset", "ccq-gla-tiny", "--ccq", "off", *args)
    backbone = _run("ppl", tmp_path / "gla", "--preset", "gla-tiny", *args)
    assert on["results"]["num_tokens"] == len(GETTYSBURG_ADDRESS.encode()) and on["results"]["num_documents"] == 1
    assert off["label"] == "ccq-gla-tiny (CCQ off)" and off["ccq"] == "off"
    assert abs(on["results"]["nll"] - off["results"]["nll"]) > 1e-3
    assert off["results"]["nll"] == pytest.approx(backbone["results"]["nll"], rel=1e-6)
    assert on["model"]["config"]["ccq"]["mode"] == "learned" and on["settings"]["window"] == 32


def test_extrapolation_streams_and_plots_with_earlier_curves(docs, tmp_path):
    args = ("--data", str(docs), "--lengths", "16,48,40", "--chunk-size", "16", "--batch-size", "2")
    first = _run("extrapolation", tmp_path / "a", "--preset", "ccq-gdn-tiny", *args)
    second = _run("extrapolation", tmp_path / "b", "--preset", "ccq-gdn-tiny", "--label", "again", *args,
                  "--compare", str(tmp_path / "a" / "extrapolation.json"))
    assert list(first["results"]["perplexity"]) == ["16", "40", "48"] and first["results"]["num_sequences"] == 2
    assert second["results"]["perplexity"] == first["results"]["perplexity"] and second["label"] == "again"
    assert second["settings"]["compare"] == [str(tmp_path / "a" / "extrapolation.json")]
    assert _png(tmp_path / "b" / "extrapolation.png")


def test_niah(tmp_path):
    record = _run("niah", tmp_path, "--preset", "ccq-gla-tiny", "--tasks", "niah_single_1,niah_single_3",
                  "--lengths", "512", "--depths", "0,100", "--num-samples", "1", "--max-new-tokens", "4",
                  "--batch-size", "2", "--graded")
    assert set(record["results"]) == {"niah_single_1", "niah_single_3"}
    graded = record["results"]["niah_single_1"]["graded"]
    assert 0 <= graded["graded_score"] <= 1 and set(graded["by_length"]) == {"512"}
    assert len(read_jsonl(tmp_path / "niah_single_3_graded.jsonl.gz")) == 2
    assert record["results"]["niah_single_3"]["by_length_depth"] == {"512": {"0": 0.0, "100": 0.0}}
    samples = read_jsonl(tmp_path / "niah_single_1.jsonl.gz")
    assert len(samples) == 2 and all(s["num_tokens"] + 4 <= 512 for s in samples)
    assert _png(tmp_path / "niah_single_3.png")


def test_delta_mu(tmp_path, capsys):
    record = _run("delta-mu", tmp_path, "--preset", "ccq-gla-tiny", "--length", "512", "--depths", "20,80",
                  "--num-samples", "1", "--top-k", "4")
    res = record["results"]
    assert res["num_prompts"] == 2 and len(res["delta_mu"]) == 1 and len(res["delta_mu"][0]) == 4  # layers x heads
    assert -1 < res["mean_delta_mu"] < 1 and [p["depth"] for p in res["prompts"]] == [20, 80]
    assert all(_png(tmp_path / f"delta_mu_{kind}.png") for kind in ("heatmap", "histograms"))
    assert "mean Delta-mu" in capsys.readouterr().out


def test_read_reports_the_engagement_on_a_checkpoint_like_model_and_refuses_one_without_ccq(docs, tmp_path, capsys):
    record = _run("read", tmp_path, "--preset", "ccq-gla-tiny", "--data", str(docs), "--length", "64",
                  "--num-sequences", "3", "--tail", "8")
    res = record["results"]
    assert res["num_sequences"] == 3 and len(res["layers"]) == 1 and res["layers"][0]["read"]["kind"] == "first_order"
    assert 0 < res["summary"]["applied_mean"] < 1 and res["summary"]["applied_at_positions"] > 0
    assert _png(tmp_path / "read_applied_mean.png") and _png(tmp_path / "read_effective_rank.png") and "applied contraction" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["read", "--preset", "gla-tiny", "--data", str(docs), "--out", str(tmp_path / "gla"), *TINY])
    assert stop.value.code == 2 and "model: no CCQ read to measure" in capsys.readouterr().err


def test_lm_eval_with_a_local_task(tmp_path):
    docs = [{"q": "The sky is", "choices": [" blue", " green"], "label": 0},
            {"q": "Grass is", "choices": [" red", " green"], "label": 1}]
    write_jsonl(tmp_path / "data.jsonl", docs)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "toy.yaml").write_text(
        "task: toy_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'data.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n')
    record = _run("lm-eval", tmp_path, "--preset", "gla-tiny", "--tasks", "toy_mc", "--include-path",
                  str(tmp_path / "tasks"), "--max-length", "32", "--batch-size", "4")
    assert record["results"]["results"]["toy_mc"]["acc,none"] in (0.0, 0.5, 1.0)


def test_longbench(tmp_path):
    prompts = {"trec": "{context}\n{input}", "qasper": "{context} Q: {input} A:"}
    (tmp_path / "dataset2prompt.json").write_text(json.dumps(prompts))
    (tmp_path / "dataset2maxlen.json").write_text(json.dumps({"trec": 3, "qasper": 5}))
    write_jsonl(tmp_path / "trec.jsonl", [{"input": "Who?", "context": "Type: Human", "answers": ["Human"],
                                          "all_classes": ["Human", "Location"], "length": 3, "_id": "t0"}])
    write_jsonl(tmp_path / "qasper.jsonl", [{"input": f"what is {i}?", "context": "words " * 40, "answers": [str(i)],
                                            "all_classes": None, "length": 40, "_id": f"q{i}"} for i in range(3)])
    record = _run("longbench", tmp_path / "out", "--preset", "gla-tiny", "--data-dir", str(tmp_path),
                  "--datasets", "trec,qasper", "--max-length", "64", "--batch-size", "2")
    assert set(record["results"]["scores"]) == {"trec", "qasper"} and 0 <= record["results"]["average"] <= 100
    preds = read_jsonl(tmp_path / "out" / "longbench_pred" / "qasper.jsonl")
    assert [p["_id"] for p in preds] == ["q0", "q1", "q2"] and all(isinstance(p["pred"], str) for p in preds)


@pytest.fixture
def longbench_dir(tmp_path):
    """LongBench's two config files for trec, and trec's data, in one folder."""
    (tmp_path / "dataset2prompt.json").write_text(json.dumps({"trec": "{context}\n{input}"}))
    (tmp_path / "dataset2maxlen.json").write_text(json.dumps({"trec": 3}))
    write_jsonl(tmp_path / "trec.jsonl", [{"input": "Who?", "context": "Type: Human", "answers": ["Human"], "_id": "t0"}])
    return tmp_path


@pytest.mark.parametrize("argv,message", [
    (["ppl", "--data", "x"], "one of the arguments --checkpoint --preset --fla-dir is required"),
    (["ppl", "--preset", "gla-tiny", "--data", "x", "--ccq", "off"], "--ccq off: the model (gla) has no CCQ read"),
    (["ppl", "--preset", "gla-tiny", "--data", "x", "--step", "3"], "--step: only used with --checkpoint"),
    (["ppl", "--preset", "gla-tinyy", "--data", "x"], "--preset: unknown value 'gla-tinyy'; expected one of"),
    (["ppl", "--preset", "gla-tiny", "--data", "x", "--batch-size", "0"], "--batch-size: expected an integer >= 1, got 0"),
    (["ppl", "--preset", "gla-tiny", "--data", "x", "--set", "layers"], "--set: expected key=value, got 'layers'"),
    (["ppl", "--preset", "gla-tiny", "--data", "DOCS", "--window", "32", "--stride", "0"],
     "stride: expected 1 <= stride < window=32, got 0"),
    (["extrapolation", "--preset", "gla-tiny", "--data", "DOCS", "--lengths", "16", "--num-sequences", "0"],
     "--num-sequences: expected an integer >= 1, got 0"),
    (["niah", "--preset", "gla-tiny", "--lengths", "1k"], "expected comma-separated integers"),
    (["niah", "--preset", "gla-tiny", "--lengths", "64", "--tasks", "niah_single_4"], "did you mean 'niah_single_3'"),
    (["niah", "--preset", "gla-tiny", "--lengths", "512", "--depths", "0,101"],
     "depths: each must be a percentage in [0, 100], got 101"),
    (["niah", "--preset", "gla-tiny", "--lengths", "512", "--num-samples", "0"],
     "num_samples: expected an integer >= 1, got 0"),
    (["longbench", "--preset", "gla-tiny", "--data-dir", "nowhere"],
     "--config-dir (default: --data-dir): nowhere lacks LongBench's dataset2prompt.json"),
    (["longbench", "--preset", "gla-tiny", "--data-dir", "LONGBENCH", "--config-dir", "nowhere"],
     "--config-dir: nowhere lacks LongBench's dataset2prompt.json"),
    (["longbench", "--preset", "gla-tiny", "--data-dir", "LONGBENCH", "--datasets", "trec,qasper"],
     "--datasets: no data or config for ['qasper', 'qasper (config)'] in "),
    (["longbench", "--preset", "gla-tiny", "--data-dir", "LONGBENCH", "--limit", "-1"],
     "--limit: expected an integer >= 1, got -1"),
])
def test_errors_name_the_argument(argv, message, docs, longbench_dir, tmp_path, capsys):
    paths = {"DOCS": str(docs), "LONGBENCH": str(longbench_dir)}
    with pytest.raises(SystemExit) as exit_info:  # --out: a run that wrongly goes on writes nowhere else
        main([paths.get(arg, arg) for arg in argv] + ["--out", str(tmp_path / "out"), *TINY])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_lm_eval_names_unknown_tasks(monkeypatch, tmp_path, capsys):
    """Only the task index differs from a real run: lm-eval's ~15k built-in tasks (20 s to index) are left out."""
    from lm_eval import tasks

    monkeypatch.setattr(tasks, "TaskManager", functools.partial(tasks.TaskManager, include_defaults=False))
    with pytest.raises(SystemExit) as exit_info:
        main(["lm-eval", "--preset", "gla-tiny", "--tasks", "no_such_task", "--out", str(tmp_path), *TINY])
    assert exit_info.value.code == 2
    assert ("--tasks: lm-eval knows no task ['no_such_task']; local task YAMLs go in a folder passed with "
            "--include-path") in capsys.readouterr().err


def test_lm_eval_without_the_package_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if it were not installed
    with pytest.raises(SystemExit) as exit_info:
        main(["lm-eval", "--preset", "gla-tiny", "--tasks", "x", "--out", str(tmp_path), *TINY])
    assert exit_info.value.code == 2 and "lm-eval: needs the lm-eval package (pip install 'ccq-jax[eval]')" in (
        capsys.readouterr().err)


def test_debug_shows_the_error_with_its_traceback(tmp_path):
    with pytest.raises(ValueError, match="--step: only used with --checkpoint"):
        main(["ppl", "--preset", "gla-tiny", "--data", "x", "--step", "3", "--debug", "--out", str(tmp_path), *TINY])


def test_ppl_on_an_empty_file_names_it(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["ppl", "--preset", "gla-tiny", "--data", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "o"),
              *TINY])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"--data: {tmp_path / 'empty.txt'} holds" in err, err
