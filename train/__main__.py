"""`ccq-train` (also `python -m train`): train one or several runs and print a side-by-side table.

    ccq-train --config demo                          # 4 tiny models x 2 seeds on MQAR, CCQ against its backbone
    ccq-train --config mqar-tiny --only gdn-tiny --set seed=3 --set data.seed=3
    ccq-train --config run.yaml --workdir runs/x --set optim.lr=1e-3 --set model.dtype=bfloat16

A user error (a bad or missing config, a workdir holding another run or not writable, a mesh
that does not fit the devices) ends with one `ccq-train: error: ...` line and exit status 2;
`--debug` shows its traceback instead.

Compiled programs are cached in ~/.cache/ccq-jax/xla ($XDG_CACHE_HOME/ccq-jax/xla), so a rerun
starts faster; CCQ_JAX_COMPILATION_CACHE=off turns that off, =DIR puts the cache in DIR, and
JAX_COMPILATION_CACHE_DIR, if set, is used as it is.
"""

import argparse
import json
import pathlib
import sys

from ccq_jax.cli import add_debug_flag, run_or_exit, use_compilation_cache, user_path
from ccq_jax.configlib import parse_overrides
from train.errors import NonFiniteLoss
from train.loop import train
from train.metrics import plot_curves, read_metrics
from train.runs import load_config, select_runs

COLUMNS = (("name", "{}", 20), ("params", "{:,}", 10), ("steps", "{}", 6), ("final_loss", "{:.3f}", 10),
           ("eval_loss", "{:.3f}", 9), ("eval_recall", "{:.1%}", 11), ("eval_next_token_accuracy", "{:.1%}", 24),
           ("ccq_vs_backbone", "{:+.1f} pts", 15), ("recall_90_at", "{}", 12))
# held-out accuracies, a column each when some run has it: recall on a synthetic recall task, next-token on text
ACCURACIES = ("eval_recall", "eval_next_token_accuracy")
LEARNED = 0.9  # the training-batch recall whose first logged step is reported as recall_90_at


def compare(summaries, metrics) -> list[dict]:
    """Each summary with `recall_90_at` (the first logged step whose training-batch recall reached 90 %, from its
    metrics rows) and, for a CCQ model trained beside its own backbone on the same seed, `ccq_vs_backbone`: the
    difference of their held-out recalls in percentage points."""
    recall = {(s["model"], s.get("seed")): s["eval_recall"] for s in summaries if "eval_recall" in s}
    out = []
    for s, rows in zip(summaries, metrics):
        s = dict(s)
        if any("recall" in r for r in rows):
            s["recall_90_at"] = next((r["step"] for r in rows if r.get("recall", 0.0) >= LEARNED), "never")
        backbone = (s["model"].removeprefix("ccq-"), s.get("seed"))
        if backbone[0] != s["model"] and backbone in recall and "eval_recall" in s:
            s["ccq_vs_backbone"] = 100 * (s["eval_recall"] - recall[backbone])
        out.append(s)
    return out


def table(summaries) -> str:
    columns = [c for c in COLUMNS if c[0] not in ACCURACIES or any(c[0] in s for s in summaries)]
    lines = ["  ".join(f"{name:>{width}s}" for name, _, width in columns)]
    for s in summaries:
        cells = [fmt.format(s[name]) if name in s else "-" for name, fmt, _ in columns]
        lines.append("  ".join(f"{c:>{w}s}" for c, (_, _, w) in zip(cells, columns)))
    return "\n".join(lines)


def by_model(summaries) -> str | None:
    """Per model trained on several seeds: its held-out recalls, their mean and range, and CCQ's difference to its
    backbone (mean and range over the seeds both ran on), said to be within the spread over seeds when its mean is
    no larger than the wider of the two models' ranges; None when no model has two runs."""
    groups = {}
    for s in summaries:
        if "eval_recall" in s:
            groups.setdefault(s["model"], []).append(s)
    if all(len(g) < 2 for g in groups.values()):
        return None
    spread = {m: 100 * (max(r["eval_recall"] for r in g) - min(r["eval_recall"] for r in g)) for m, g in groups.items()}
    lines = [f"{'model':>14s}  {'seeds':>8s}  {'held-out recall':>22s}  {'mean':>6s}  {'range':>5s}  "
             "CCQ vs backbone"]
    for model, runs in groups.items():
        recalls = [r["eval_recall"] for r in runs]
        deltas = [r["ccq_vs_backbone"] for r in runs if "ccq_vs_backbone" in r]
        delta = ""
        if deltas:
            mean, wider = sum(deltas) / len(deltas), max(spread[model], spread[model.removeprefix("ccq-")])
            delta = (f"{mean:+.1f} pts ({min(deltas):+.1f} .. {max(deltas):+.1f}), "
                     + ("within the spread over seeds" if abs(mean) <= wider else "larger than the spread over seeds"))
        lines.append(f"{model:>14s}  {','.join(str(r.get('seed', '?')) for r in runs):>8s}  "
                     f"{' '.join(f'{x:.1%}' for x in recalls):>22s}  {sum(recalls) / len(recalls):6.1%}  "
                     f"{spread[model]:5.1f}  {delta}".rstrip())
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ccq-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="demo", help="a named run (demo, mqar-tiny, smoke) or a YAML file")
    p.add_argument("--workdir", default=None, help="where checkpoints, metrics and plots go (default runs/<config>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. optim.lr=1e-3 or model.hidden_size=128 (repeatable)")
    p.add_argument("--only", default=None, metavar="NAME,NAME",
                   help="train only these runs of a config that has several (e.g. --only gdn-tiny,ccq-gdn-tiny)")
    p.add_argument("--no-progress", action="store_true")
    add_debug_flag(p)
    a = p.parse_args(argv)
    use_compilation_cache()
    return run_or_exit(p, lambda: _run(a), a.debug, errors=(NonFiniteLoss,))  # on_nan=stop: the guard's message


def _run(a: argparse.Namespace) -> int:
    runs = load_config(a.config, parse_overrides(a.overrides))
    several = len(runs) > 1  # each run in a folder of its own, also when --only picks one
    runs = select_runs(runs, a.only)
    workdir = user_path(a.workdir or pathlib.Path("runs") / pathlib.Path(a.config).stem)
    summaries = []
    for run in runs:
        summaries.append(train(run, workdir / run.name if several else workdir, progress=not a.no_progress))
        if summaries[-1]["preempted"]:
            print(f"stopped by SIGTERM; run the same command again to resume from {workdir}")
            return 143
    workdir.mkdir(parents=True, exist_ok=True)
    metrics = [read_metrics((workdir / r.name if several else workdir) / "metrics.jsonl") for r in runs]
    summaries = compare(summaries, metrics)
    (workdir / "summary.json").write_text(json.dumps(summaries, indent=1))
    if several:
        plot_curves({r.name: rows for r, rows in zip(runs, metrics)}, workdir / "loss_curves.png",
                    title=f"{a.config}: training loss")
    print()
    print(table(summaries))
    grouped = by_model(summaries)
    if grouped:
        print(f"\n{grouped}")
    if any("ccq_vs_backbone" in s for s in summaries):
        print("\nCCQ vs backbone: the CCQ model's held-out recall minus its backbone's on the same seed, in points. "
              "Within the spread\nover seeds (the wider range of the two), the difference is the seed's, not "
              "CCQ's; docs/learning.md has 10 seeds.\nrecall_90_at: the first logged step whose training batch "
              "reached 90 % recall.")
    print(f"\nmetrics, checkpoints and plots: {workdir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
