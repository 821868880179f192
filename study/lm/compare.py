"""The language-modelling study's numbers, read back from its result folders: each run, and seeds side by side.

    python -m study.lm.compare results/lm

Each folder under the root is one run of `study/lm/run.sh` (RUN, or RUN-seedN for the run trained with
`--set seed=N --set data.seed=N`; no suffix is runs.yaml's seed 0). The numbers come from the logs that every
`ccq-eval` command writes (`ppl.log`, `extrapolation.log`, `niah.log`, `delta_mu.log`, and `*_ccq_off.log` for
the CCQ-off evaluations) and from `metrics.jsonl`. A run without an S-NIAH log (its call stopped before
S-NIAH finished) shows "no table" there, one without an extrapolation log (a run given a shorter
`EVALUATIONS` list) "not run", one without a Delta-mu log (a Transformer, as Delta-mu reads linear-attention keys, or a
shorter `EVALUATIONS` list) "-"; the perplexity log must be present. Prints four markdown tables: every run; each
model's mean and range over its seeds; each comparison of `PAIRS` (CCQ minus its backbone, fixed gate minus
learned) per seed both runs have; and the training loss at `LOSS_STEPS` and over the last `LAST_STEPS` steps,
per seed (runs of one seed and mix read the same batches: the positive controls' comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import statistics

# (model, the model it is compared with): CCQ against its backbone, with the retrieval share in training too
# (folders named RUN-retrieval1600: `RETRIEVAL_DOCUMENTS=1600`), and the paper's fixed-gate ablation
PAIRS = (("ccq-gla-100m", "gla-100m"), ("ccq-gdn-100m", "gdn-100m"),
         ("ccq-gla-100m-retrieval1600", "gla-100m-retrieval1600"), ("ccq-gla-100m-fixed", "ccq-gla-100m"))
LENGTHS = (2048, 4096, 8192, 16384)
LOSS_STEPS = (100, 200, 400, 800, 1200, 1460)
LAST_STEPS = 200
SEED_SUFFIX = re.compile(r"^(?P<model>.+)-seed(?P<seed>\d+)$")


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One model's evaluations with CCQ on (or off): held-out perplexity, perplexity at each length (None: not
    run), S-NIAH accuracy per task over all lengths and depths (percent; None: not run), mean Delta-mu (None:
    none)."""
    perplexity: float
    by_length: dict | None
    niah: dict | None
    delta_mu: float | None


@dataclasses.dataclass(frozen=True)
class Run:
    model: str
    seed: int
    tokens_per_s: float
    losses: dict  # {step: training loss} of metrics.jsonl
    on: Evaluation
    off: Evaluation | None  # CCQ models only

    @property
    def last_loss(self) -> float:
        return self.losses[max(self.losses)]


def _search(pattern: str, path: pathlib.Path) -> re.Match:
    found = re.search(pattern, path.read_text(), re.M)
    if found is None:
        raise ValueError(f"{path}: no line matching {pattern!r}")
    return found


def read_evaluation(folder: pathlib.Path, tag: str = "") -> Evaluation:
    """The evaluations of one run from its logs; tag "_ccq_off" reads the CCQ-off ones."""
    extrapolation_log = folder / f"extrapolation{tag}.log"
    by_length = dict((int(n), float(p)) for n, p in
                     re.findall(r"^\s+(\d+)\s+([\d.]+)\s*$", extrapolation_log.read_text(), re.M)) \
        if extrapolation_log.exists() else None
    niah_log = folder / f"niah{tag}.log"
    niah_text = niah_log.read_text() if niah_log.exists() else ""
    # None: no S-NIAH table, as S-NIAH did not run or its call's time limit cut it before the table
    niah = dict((task, float(acc))
                for task, acc in re.findall(r"^(niah_\S+)\s.*\s([\d.]+)\s*$", niah_text, re.M)) or None
    if by_length is not None and sorted(by_length) != list(LENGTHS):
        raise ValueError(f"{folder}: expected perplexity at {LENGTHS} in its extrapolation{tag}.log")
    delta_mu_log = folder / f"delta_mu{tag}.log"
    delta_mu = float(_search(r"mean Delta-mu over layers and heads: (\S+)", delta_mu_log)[1]) \
        if delta_mu_log.exists() else None
    return Evaluation(perplexity=float(_search(r"^perplexity (\S+)", folder / f"ppl{tag}.log")[1]),
                      by_length=by_length, niah=niah, delta_mu=delta_mu)


def read_run(folder: pathlib.Path) -> Run:
    """One run folder: its model and seed from the folder's name, training from metrics.jsonl, evaluations."""
    named = SEED_SUFFIX.match(folder.name)
    model, seed = (named["model"], int(named["seed"])) if named else (folder.name, 0)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "tokens_per_s" in r]
    if len(rows) < 3:
        raise ValueError(f"{folder}/metrics.jsonl: expected at least 3 training rows, got {len(rows)}")
    # the first row holds the compilation and the last one misreports its rate (docs/results.md): both left out
    rate = statistics.median(r["tokens_per_s"] for r in rows[1:-1])
    off = read_evaluation(folder, "_ccq_off") if (folder / "ppl_ccq_off.log").exists() else None
    losses = {r["step"]: r["loss"] for r in rows}
    return Run(model, seed, rate, losses, read_evaluation(folder), off)


def read_runs(root: pathlib.Path) -> list[Run]:
    """Every run folder under root (those with a metrics.jsonl), by model then seed."""
    runs = [read_run(f) for f in sorted(root.iterdir()) if (f / "metrics.jsonl").exists()]
    return sorted(runs, key=lambda r: (r.model, r.seed))


def _niah(e: Evaluation) -> str:
    if e.niah is None:
        return "no table"
    return " / ".join(f"{v:.0f}" for _, v in sorted(e.niah.items())) + " %"  # the logs print percent


def _by_length(e: Evaluation) -> str:
    return "not run" if e.by_length is None else " / ".join(f"{e.by_length[n]:.2f}" for n in LENGTHS)


def runs_table(runs) -> str:
    lines = ["| model | seed | train loss (last step) | held-out ppl | ppl, CCQ off | ppl at 2K / 4K / 8K / 16K "
             "| S-NIAH single_1/2/3 | mean Delta-mu (CCQ off) | tokens/s |",
             "|---|---:|---:|---:|---:|---|---|---:|---:|"]
    for r in runs:
        off = f"{r.off.perplexity:.3f}" if r.off else "-"
        mu = "-" if r.on.delta_mu is None else f"{r.on.delta_mu:.3f}" + (f" ({r.off.delta_mu:.3f})" if r.off else "")
        lines.append(f"| {r.model} | {r.seed} | {r.last_loss:.3f} | {r.on.perplexity:.3f} | {off} | "
                     + _by_length(r.on) + f" | {_niah(r.on)} | {mu} | {r.tokens_per_s / 1e3:.0f}K |")
    return "\n".join(lines)


def by_model(runs) -> dict:
    """{model: {seed: run}}."""
    models = {}
    for r in runs:
        models.setdefault(r.model, {})[r.seed] = r
    return models


def seeds_table(runs) -> str:
    """Each model's held-out and 16K perplexity: mean over seeds and, with more than one, the range (at 16K over
    the seeds whose extrapolation ran)."""
    lines = ["| model | seeds | held-out ppl: mean (min - max) | at 16K: mean (min - max) |", "|---|---|---|---|"]
    for model, seeds in by_model(runs).items():
        cells = []
        for values in ([r.on.perplexity for r in seeds.values()],
                       [r.on.by_length[16384] for r in seeds.values() if r.on.by_length is not None]):
            if not values:
                cells.append("not run")
                continue
            spread = f" ({min(values):.3f} - {max(values):.3f})" if len(values) > 1 else ""
            cells.append(f"{statistics.mean(values):.3f}{spread}")
        lines.append(f"| {model} | {', '.join(map(str, sorted(seeds)))} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def pair_differences(runs) -> list[tuple[str, str, int, float, float | None]]:
    """(model, reference, seed, held-out ppl change %, 16K ppl change % or None where either extrapolation did
    not run) for each pair of PAIRS and seed both models have."""
    models, out = by_model(runs), []
    for model, reference in PAIRS:
        for seed in sorted(set(models.get(model, {})) & set(models.get(reference, {}))):
            a, b = models[model][seed].on, models[reference][seed].on
            at_16k = None if a.by_length is None or b.by_length is None else \
                100 * (a.by_length[16384] / b.by_length[16384] - 1)
            out.append((model, reference, seed, 100 * (a.perplexity / b.perplexity - 1), at_16k))
    return out


def pairs_table(runs) -> str:
    lines = ["| model - reference | seed | held-out ppl | at 16K |", "|---|---:|---:|---:|"]
    for model, reference, seed, held_out, at_16k in pair_differences(runs):
        lines.append(f"| {model} - {reference} | {seed} | {held_out:+.2f} % | "
                     + ("not run" if at_16k is None else f"{at_16k:+.2f} %") + " |")
    return "\n".join(lines)


def last_mean(run: Run, last: int = LAST_STEPS) -> float:
    """The mean logged training loss over the run's last `last` steps."""
    final = max(run.losses)
    return statistics.mean(v for step, v in run.losses.items() if step > final - last)


def losses_table(runs) -> str:
    """Training loss at LOSS_STEPS and over the last LAST_STEPS steps, runs of one seed together."""
    lines = ["| model | seed | " + " | ".join(f"step {s}" for s in LOSS_STEPS) + f" | last {LAST_STEPS} steps |",
             "|---|---:|" + "---:|" * (len(LOSS_STEPS) + 1)]
    for r in sorted(runs, key=lambda r: (r.seed, last_mean(r))):
        cells = [f"{r.losses[s]:.3f}" if s in r.losses else "-" for s in LOSS_STEPS]
        lines.append(f"| {r.model} | {r.seed} | " + " | ".join(cells) + f" | {last_mean(r):.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=pathlib.Path, help="the folder of run folders (results/lm)")
    runs = read_runs(p.parse_args(argv).root)
    print(runs_table(runs), seeds_table(runs), pairs_table(runs), losses_table(runs), sep="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
