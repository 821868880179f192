"""study/lm/run.sh's control flow with a stand-in Python that records each command: a full run trains then
evaluates; EVALUATE_ONLY runs just the named evaluations on an existing checkpoint, EVALUATIONS just those after
training, and both reject unknown names before any work."""

import os
import pathlib
import subprocess

import pytest

from train.runs import load_config

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "study" / "lm" / "run.sh"

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$2" = train ]; then  # ccq-train: the run's checkpoint folder under --workdir, and the workdir's summary
  while [ "$1" != --workdir ]; do shift; done
  mkdir -p "$2/$RUN" && touch "$2/$RUN/metrics.jsonl" "$2/summary.json" "$2/loss_curves.png"
fi
"""


def _run(tmp_path, run, out="out", fresh=False, **env):
    """fresh: no unpacked corpus in the work folder."""
    work = tmp_path / "work"
    (work / "corpus" / "shards" / "heldout").mkdir(parents=True, exist_ok=True)
    if not fresh:
        (work / "corpus" / "shards" / "heldout" / "manifest.json").write_text("{}")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    full_env = {**os.environ, "PYTHON": str(fake), "STUDY_WORK": str(work), "CALLS": str(calls), "RUN": run, **env}
    proc = subprocess.run(["bash", str(SCRIPT), run, str(tmp_path / out)], env=full_env, capture_output=True,
                          text=True, cwd=SCRIPT.parents[2])
    commands = [line.split()[:3] for line in calls.read_text().splitlines()]
    return proc, commands


def test_full_run_trains_then_runs_every_evaluation(tmp_path):
    proc, commands = _run(tmp_path, "ccq-gla-100m")
    assert proc.returncode == 0, proc.stderr
    assert commands[0] == ["-m", "train", "--config"]
    evaluations = sorted(c[1] if c[1] != "eval" else c[2] for c in commands[1:])
    # CCQ on and off; the read's engagement and the trained weights' causality once
    assert evaluations == sorted(["ppl", "extrapolation", "niah", "delta-mu"] * 2 + ["read", "study.lm.causality"])
    assert "causality done" in (tmp_path / "out" / "timeline.txt").read_text()


def test_s_niah_is_scored_graded_beside_the_generated_answers(tmp_path):
    _run(tmp_path, "gla-100m")
    [niah] = [line for line in (tmp_path / "calls.txt").read_text().splitlines() if line.startswith("-m eval niah ")]
    assert " --graded" in niah


def test_a_transformer_has_no_delta_mu_or_causality_check(tmp_path):
    """Both read linear-attention layers: asked of a Transformer they could only fail."""
    proc, commands = _run(tmp_path, "transformer-100m")
    assert proc.returncode == 0, proc.stderr
    assert sorted(c[2] for c in commands[1:]) == ["extrapolation", "niah", "ppl"]


def test_evaluate_only_skips_training_and_other_evaluations(tmp_path):
    proc, _ = _run(tmp_path, "gdn-100m")
    assert proc.returncode == 0, proc.stderr
    proc, commands = _run(tmp_path, "gdn-100m", EVALUATE_ONLY="niah")
    assert proc.returncode == 0, proc.stderr
    assert commands == [["-m", "eval", "niah"]]
    assert "niah done" in (tmp_path / "out" / "timeline.txt").read_text()


def test_evaluations_trains_then_runs_only_the_named_evaluations(tmp_path):
    proc, commands = _run(tmp_path, "ccq-gdn-100m", EVALUATIONS="niah niah_ccq_off read")
    assert proc.returncode == 0, proc.stderr
    assert commands[0] == ["-m", "train", "--config"]
    assert sorted(c[2] for c in commands[1:]) == ["niah", "niah", "read"]


def test_a_misspelt_evaluation_is_refused_before_the_corpus_is_unpacked(tmp_path):
    """A typo must not cost the minutes of unpacking and making the retrieval mix on a lent GPU."""
    proc, commands = _run(tmp_path, "gdn-100m", EVALUATIONS="niah redd", RETRIEVAL_DOCUMENTS="30",
                           fresh=True)  # unpacking would run first
    assert proc.returncode == 2 and commands == []
    assert "EVALUATIONS: expected names among ppl extrapolation niah delta_mu causality (those of gdn-100m), got redd" \
        in proc.stderr


def test_evaluations_beside_evaluate_only_is_refused_instead_of_ignored(tmp_path):
    _run(tmp_path, "gdn-100m")
    proc, commands = _run(tmp_path, "gdn-100m", EVALUATE_ONLY="niah", EVALUATIONS="ppl")
    assert proc.returncode == 2 and commands == []
    assert "EVALUATIONS: expected it unset with EVALUATE_ONLY" in proc.stderr


def test_each_out_name_keeps_its_own_checkpoint(tmp_path):
    """A run at another seed on the same machine (another OUT name) trains its own checkpoint instead of resuming
    the first one's; EVALUATE_ONLY finds a checkpoint only under the OUT name that trained it."""
    _run(tmp_path, "gla-100m", out="gla-100m-seed1")
    _run(tmp_path, "gla-100m", out="gla-100m-seed2")
    assert sorted(p.name for p in (tmp_path / "work" / "runs").iterdir()) == ["gla-100m-seed1", "gla-100m-seed2"]
    assert (tmp_path / "work" / "runs" / "gla-100m-seed2" / "gla-100m" / "metrics.jsonl").exists()
    proc, _ = _run(tmp_path, "gla-100m", out="gla-100m-seed3", EVALUATE_ONLY="niah")
    assert proc.returncode == 2 and "gla-100m-seed3/gla-100m" in proc.stderr


@pytest.mark.parametrize("only, message", [("niah", "expected a trained checkpoint"),
                                           ("niahh", "expected names among")])
def test_evaluate_only_rejects_a_missing_checkpoint_or_unknown_name(tmp_path, only, message):
    if only == "niahh":
        _run(tmp_path, "gdn-100m")
    proc, commands = _run(tmp_path, "gdn-100m", EVALUATE_ONLY=only)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert commands == []


def test_evaluate_only_accepts_only_the_runs_own_evaluations(tmp_path):
    """A plain backbone has no CCQ-off evaluations: asking for one is refused instead of running nothing."""
    _run(tmp_path, "gdn-100m")
    proc, commands = _run(tmp_path, "gdn-100m", EVALUATE_ONLY="niah_ccq_off")
    assert proc.returncode == 2 and commands == []
    assert "expected names among ppl extrapolation niah delta_mu causality (those of gdn-100m), got niah_ccq_off" in proc.stderr
    _run(tmp_path, "ccq-gdn-100m")
    proc, commands = _run(tmp_path, "ccq-gdn-100m", EVALUATE_ONLY="niah_ccq_off")
    assert proc.returncode == 0 and commands == [["-m", "eval", "niah"]]


@pytest.mark.parametrize("needles,folder", [(None, "retrieval_30"), ("8", "retrieval_30_needles8")])
def test_a_retrieval_mix_has_a_folder_per_count_and_needles(tmp_path, needles, folder):
    env = {"RETRIEVAL_DOCUMENTS": "30"} | ({"RETRIEVAL_NEEDLES": needles} if needles else {})
    proc, _ = _run(tmp_path, "gla-100m", **env)
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    made = [c for c in calls if c.startswith("-m study.retrieval_docs")]
    assert len(made) == 1 and f"/{folder}/niah.jsonl" in made[0] and f"--needles {needles or 1}" in made[0]
    train = next(c for c in calls if c.startswith("-m train --config"))
    assert f"data.paths=[{tmp_path}/work/corpus/shards/train,{tmp_path}/work/corpus/{folder}/shards]" in train


def test_every_run_of_the_study_builds_its_model_config():
    """runs.yaml is read only on the lent GPU: a run whose overrides do not validate would cost a call there."""
    runs = load_config(str(SCRIPT.parent / "runs.yaml"))
    assert len({r.name for r in runs}) == len(runs) >= 8
    for run in runs:
        config = run.model_config
        assert config.vocab_size == 16384 and (config.family == "transformer" or config.kernel.impl == "pallas")
    conv = {r.name: r.model_config for r in runs if r.name.endswith("-conv")}
    assert sorted(conv) == ["ccq-gla-100m-conv", "gla-100m-conv"] and all(c.use_short_conv for c in conv.values())
