"""What the study's models answer in S-NIAH when they score 0 %: the answers' shape against chance.

    python -m study.lm.niah_answers results/lm

Exact-match accuracy cannot tell a model that never learned the answer's format from one that answers in the
right format with the wrong value. For each run folder under the root and each S-NIAH evaluation in it
(`niah/`, `niah_ccq_off/`: the `niah_single_*.jsonl.gz` records `ccq-eval niah` writes), this prints the share of
answers shaped like the needle's value (its first word a digit string for a number; for a UUID eight hex digits,
a dash, then hex digits and dashes), the share whose first character is the value's first character, that
share's chance level for a value-shaped guess (1/9 for the numbers, which start with 1-9; 1/16 for UUIDs), and
the most common first word with its share. Where the evaluation also wrote graded records
(`niah_single_*_graded.jsonl.gz`, `ccq-eval niah --graded`), a second table gives the graded score per length:
the true value's teacher-forced rank among values of its length (`eval.niah.summarize_graded`; 0.5 chance),
and for records with the needle-free control its score and the needle lift (`eval.niah.needle_lift`, nats).
A third table gives the figure the graded pairs' predictions are read on (docs/results.md, G-1 and G-2): for
each evaluation with graded records of all of `TASKS` at all of `HEADROOM_LENGTHS` (the lengths where the
backbone has headroom), the graded score, its needle-free control and the needle lift, each the mean over those
tasks and lengths.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import pathlib
import re

from eval.niah import TASKS as NIAH_TASKS, summarize_graded

SHAPES = {"number": re.compile(r"\d+"), "uuid": re.compile(r"[0-9a-f]{8}-[0-9a-f-]*")}
CHANCE = {"number": 1 / 9, "uuid": 1 / 16}


@dataclasses.dataclass(frozen=True)
class AnswerSummary:
    """One S-NIAH task's answers in one evaluation folder."""
    run: str
    evaluation: str
    task: str
    samples: int
    shaped: float
    first_char_right: float
    chance: float
    most_common: str
    most_common_share: float


def value_kind(value: str) -> str:
    """"number" or "uuid": the kind of a needle's value."""
    return "number" if value.isdigit() else "uuid"


def first_word(pred: str) -> str:
    """The answer's first whitespace-separated word, without a trailing full stop."""
    words = pred.split()
    return words[0].rstrip(".") if words else ""


def summarise(records: list[dict], run: str, evaluation: str) -> AnswerSummary:
    """The shape, first-character and most-common statistics of one task's records (`pred`, `outputs`)."""
    if not records:
        raise ValueError(f"records: expected at least one S-NIAH record of {run}/{evaluation}, got none")
    kinds = {value_kind(r["outputs"][0]) for r in records}
    if len(kinds) != 1:
        raise ValueError(f"records: expected one kind of needle value per task, got {sorted(kinds)}")
    kind = kinds.pop()
    words = [first_word(r["pred"]) for r in records]
    shaped = sum(bool(SHAPES[kind].fullmatch(w)) for w in words)
    right = sum(w[:1] == r["outputs"][0][:1] for w, r in zip(words, records))
    common, count = collections.Counter(words).most_common(1)[0]
    n = len(records)
    return AnswerSummary(run, evaluation, records[0]["task"], n, shaped / n, right / n, CHANCE[kind], common, count / n)


GRADED = "_graded.jsonl.gz"
TASKS = tuple(NIAH_TASKS)  # every S-NIAH task: study/lm/run.sh runs them all (a test holds the two together)
HEADROOM_LENGTHS = (4096, 8192)


def _records(path: pathlib.Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_root(root: pathlib.Path) -> list[AnswerSummary]:
    """Every run folder's S-NIAH evaluations under `root` (generated answers), in name order."""
    return [summarise(_records(path), path.parent.parent.name, path.parent.name)
            for path in sorted(root.glob("*/niah*/niah_single_*.jsonl.gz")) if not path.name.endswith(GRADED)]


def read_graded(root: pathlib.Path) -> list[tuple[str, str, str, dict]]:
    """(run, evaluation, task, `summarize_graded` of its records) for every graded record file under `root`."""
    return [(path.parent.parent.name, path.parent.name, path.name[:-len(GRADED)], summarize_graded(_records(path)))
            for path in sorted(root.glob(f"*/niah*/niah_single_*{GRADED}"))]


def table(summaries: list[AnswerSummary]) -> str:
    """Markdown, one row per run, evaluation and task."""
    lines = ["| run | evaluation | task | samples | value-shaped | first character right | chance | most common |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for s in summaries:
        lines.append(f"| {s.run} | {s.evaluation} | {s.task} | {s.samples} | {100 * s.shaped:.0f} % | "
                     f"{100 * s.first_char_right:.0f} % | {100 * s.chance:.0f} % | "
                     f"`{s.most_common}` ({100 * s.most_common_share:.0f} %) |")
    return "\n".join(lines)


def graded_table(graded: list[tuple[str, str, str, dict]]) -> str:
    """Markdown, one row per run, evaluation and task: the graded score at each length and overall, and the
    needle-free control's overall score and the needle lift (`eval.niah.needle_lift`; "-" for records written
    before the control)."""
    lengths = sorted({n for *_, g in graded for n in g["by_length"]})
    lines = ["| run | evaluation | task | " + " | ".join(f"graded at {n}" for n in lengths)
             + " | all | top-1 | no needle (all) | needle lift, nats (all) |",
             "|---|---|---|" + "---:|" * (len(lengths) + 4)]
    for run, evaluation, task, g in graded:
        cells = [f"{g['by_length'][n]['graded_score']:.3f}" if n in g["by_length"] else "-" for n in lengths]
        control = f"{g['control_score']:.3f}" if "control_score" in g else "-"
        lift = f"{g['needle_lift']:.2f}" if "needle_lift" in g else "-"
        lines.append(f"| {run} | {evaluation} | {task} | " + " | ".join(cells)
                     + f" | {g['graded_score']:.3f} | {100 * g['graded_top1']:.0f} % | {control} | {lift} |")
    return "\n".join(lines)


def headroom_rows(graded: list[tuple[str, str, str, dict]]) -> list[tuple[str, str, float, float, float]]:
    """(run, evaluation, graded score, control score, needle lift), each the mean over TASKS at HEADROOM_LENGTHS,
    for every evaluation whose graded records cover them all with the needle-free control."""
    by_evaluation: dict[tuple[str, str], dict[str, dict]] = {}
    for run, evaluation, task, g in graded:
        by_evaluation.setdefault((run, evaluation), {})[task] = g
    rows = []
    for (run, evaluation), tasks in by_evaluation.items():
        if not set(TASKS) <= set(tasks):
            continue
        cells = [tasks[t]["by_length"].get(n) for t in TASKS for n in HEADROOM_LENGTHS]
        if not all(c and "control_score" in c for c in cells):
            continue
        mean = lambda key: sum(c[key] for c in cells) / len(cells)
        rows.append((run, evaluation, mean("graded_score"), mean("control_score"), mean("needle_lift")))
    return rows


def headroom_table(rows: list[tuple[str, str, float, float, float]]) -> str:
    """Markdown, one row per evaluation of `headroom_rows`."""
    where = f"{', '.join(t.removeprefix('niah_') for t in TASKS)} at {' and '.join(map(str, HEADROOM_LENGTHS))}"
    lines = [f"| run | evaluation | graded, {where} | no needle | needle lift, nats |", "|---|---|---:|---:|---:|"]
    lines += [f"| {run} | {evaluation} | {score:.3f} | {control:.3f} | {lift:.2f} |"
              for run, evaluation, score, control, lift in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=pathlib.Path, help="the folder of run folders (results/lm)")
    a = p.parse_args(argv)
    summaries = read_root(a.root)
    if not summaries:
        p.error(f"root: no */niah*/niah_single_*.jsonl.gz under {a.root}")
    print(table(summaries))
    graded = read_graded(a.root)
    if graded:
        print("", graded_table(graded), sep="\n")
    headroom = headroom_rows(graded)
    if headroom:
        print("", headroom_table(headroom), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
