"""study/lm/compare.py: the numbers read from the study's logs equal the JSON the same evaluations wrote, the
seed and pair tables compute what they say, and a log without its line is refused by name."""

import dataclasses
import json
import pathlib
import re

import pytest

from study.lm.compare import (LENGTHS, Evaluation, Run, last_mean, losses_table, pair_differences, read_evaluation,
                              read_run, read_runs, runs_table, seeds_table)

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "results" / "lm"


def _with_json():
    """(folder, tag) of every committed evaluation that also came back as JSON."""
    return [(f, tag) for f in sorted(RESULTS.iterdir()) for tag in ("", "_ccq_off")
            if (f / f"ppl{tag}" / "ppl.json").exists() and (f / f"ppl{tag}.log").exists()]


def test_the_committed_runs_have_json_to_check_against():
    assert len(_with_json()) >= 8


@pytest.mark.parametrize("folder,tag", _with_json(), ids=lambda x: getattr(x, "name", x))
def test_logs_read_as_the_json_of_the_same_evaluation(folder, tag):
    got = read_evaluation(folder, tag)
    results = lambda name: json.loads((folder / f"{name}{tag}" / f"{name}.json").read_text())["results"]
    assert got.perplexity == pytest.approx(results("ppl")["perplexity"], abs=5e-5)
    if (folder / f"extrapolation{tag}" / "extrapolation.json").exists():
        assert got.by_length == pytest.approx(
            {int(n): p for n, p in results("extrapolation")["perplexity"].items()}, abs=5e-5)
    else:  # a run given a shorter EVALUATIONS list
        assert got.by_length is None and not (folder / f"extrapolation{tag}.log").exists()
    if (folder / f"niah{tag}" / "niah.json").exists():
        assert got.niah == pytest.approx({t: v["overall"] for t, v in results("niah").items()}, abs=5e-2)
    else:  # S-NIAH did not finish in its call: no JSON, and no log or one without the table
        log = folder / f"niah{tag}.log"
        assert got.niah is None and (not log.exists() or "niah_single_1 " not in log.read_text())
    if (folder / f"delta_mu{tag}" / "delta_mu.json").exists():
        assert got.delta_mu == pytest.approx(results("delta_mu")["mean_delta_mu"], abs=5e-5)
    else:  # a Transformer (Delta-mu reads linear-attention keys), or a run given a shorter EVALUATIONS list
        assert got.delta_mu is None and not (folder / f"delta_mu{tag}.log").exists()
        assert folder.name.startswith("transformer-") or got.by_length is None


def test_every_committed_run_reads_and_seeds_come_from_the_folder_name():
    runs = read_runs(RESULTS)
    assert {(r.model, r.seed) for r in runs} >= {("gla-100m", 0), ("gla-100m", 1), ("ccq-gla-100m", 1)}
    folders = [f for f in sorted(RESULTS.iterdir()) if (f / "metrics.jsonl").exists()]
    for folder in folders:
        run = read_run(folder)
        assert (run.off is not None) == (folder / "ppl_ccq_off.log").exists(), folder.name
        if run.off is not None:
            assert run.model.startswith("ccq-"), folder.name
        elif run.model.startswith("ccq-"):  # a CCQ run given an EVALUATIONS list without ppl_ccq_off says so
            planned = re.search(r'EVALUATIONS="([^"]*)"', (folder / "timeline.txt").read_text())
            assert planned and "ppl_ccq_off" not in planned[1].split(), folder.name


def _run(model, seed, ppl, at_16k):
    by_length = {n: at_16k for n in LENGTHS}
    return Run(model, seed, 1e5, {1460: 3.0}, Evaluation(ppl, by_length, {"niah_single_1": 0.0}, -0.1), None)


def test_pairs_compare_only_the_seeds_both_models_have():
    runs = [_run("gla-100m", 0, 20.0, 10.0), _run("gla-100m", 1, 25.0, 10.0), _run("ccq-gla-100m", 1, 24.0, 11.0),
            _run("ccq-gla-100m", 2, 1.0, 1.0)]
    assert pair_differences(runs) == [("ccq-gla-100m", "gla-100m", 1, pytest.approx(-4.0), pytest.approx(10.0))]
    table = seeds_table(runs)
    assert "| gla-100m | 0, 1 | 22.500 (20.000 - 25.000) | 10.000 (10.000 - 10.000) |" in table


def test_a_log_without_its_line_is_refused_by_name(tmp_path):
    folder = tmp_path / "gla-100m-seed3"
    folder.mkdir()
    for name in ("ppl", "extrapolation", "niah", "delta_mu"):
        (folder / f"{name}.log").write_text((RESULTS / "gla-100m" / f"{name}.log").read_text())
    rows = [{"step": s, "loss": 3.0, "tokens_per_s": 1e5 * s} for s in (1, 2, 3, 4)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = read_run(folder)
    assert (run.model, run.seed, run.tokens_per_s, run.off) == ("gla-100m", 3, 2.5e5, None)
    # S-NIAH cut by its call's limit before its table (the log's first line only), or never started (no log):
    # shown as "no table", the rest still read
    for cut in (lambda log: log.write_text("gla-100m@1460: niah\n"), lambda log: log.unlink()):
        cut(folder / "niah.log")
        run = read_run(folder)
        assert run.on.niah is None and run.on.perplexity > 1
        assert "| no table |" in runs_table([run])
    (folder / "delta_mu.log").write_text("nothing here\n")
    with pytest.raises(ValueError, match="delta_mu.log"):
        read_run(folder)
    (folder / "delta_mu.log").unlink()  # none run (a Transformer's): shown as "-"
    run = read_run(folder)
    assert run.on.delta_mu is None and "| - | 250K |" in runs_table([run])
    (folder / "extrapolation.log").unlink()  # not in the run's EVALUATIONS: "not run", the rest still read
    run = read_run(folder)
    assert run.on.by_length is None and run.on.perplexity > 1
    assert "| not run | no table |" in runs_table([run]) and "| not run |" in seeds_table([run])
    reference = _run("gla-100m", 3, run.on.perplexity / 1.01, 10.0)
    assert pair_differences([dataclasses.replace(run, model="ccq-gla-100m"), reference]) == [
        ("ccq-gla-100m", "gla-100m", 3, pytest.approx(1.0), None)]


def test_losses_table_reads_each_step_and_the_last_steps_mean():
    evaluation = Evaluation(10.0, {n: 10.0 for n in LENGTHS}, None, None)
    losses = {step: 5.0 - step / 1000 for step in range(20, 1461, 20) if step != 100}  # step 100 not logged
    run = Run("gla-100m", 0, 1e5, losses, evaluation, None)
    assert last_mean(run) == pytest.approx(5.0 - 1.37)  # steps 1280 ... 1460
    better = Run("gdn-100m", 0, 1e5, {s: v - 1 for s, v in losses.items()}, evaluation, None)
    table = losses_table([run, better])
    assert table.index("| gdn-100m | 0 | - | 3.800 |") < table.index("| gla-100m | 0 | - | 4.800 |")  # step 100: -


def test_a_run_without_its_lengths_or_training_rows_is_refused_by_name(tmp_path):
    folder = tmp_path / "gla-100m"
    folder.mkdir()
    for name in ("ppl", "extrapolation", "niah", "delta_mu"):
        (folder / f"{name}.log").write_text((RESULTS / "gla-100m" / f"{name}.log").read_text())
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 3.0, "tokens_per_s": 1.0}) + "\n")
    with pytest.raises(ValueError, match=r"gla-100m/metrics.jsonl: expected at least 3 training rows, got 1"):
        read_run(folder)
    (folder / "extrapolation.log").write_text("    2048        20.1475\n")
    with pytest.raises(ValueError, match=r"expected perplexity at \(2048, 4096, 8192, 16384\) in its extrapolation.log"):
        read_evaluation(folder)
