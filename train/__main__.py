"""`ccq-train` (also `python -m train`): train one or several runs and print a side-by-side table.

    ccq-train --config demo                          # tiny GLA vs CCQ-GLA (and GDN) on MQAR
    ccq-train --config run.yaml --workdir runs/x --set optim.lr=1e-3 --set model.dtype=bfloat16
"""

import argparse
import json
import pathlib
import sys

from ccq_jax.configlib import parse_overrides
from train.config import load_config
from train.metrics import plot_curves, read_metrics

COLUMNS = (("name", "{}", 16), ("params", "{:,}", 10), ("steps", "{}", 6), ("final_loss", "{:.3f}", 10),
           ("eval_loss", "{:.3f}", 9), ("eval_recall", "{:.1%}", 11))


def table(summaries) -> str:
    lines = ["  ".join(f"{name:>{width}s}" for name, _, width in COLUMNS)]
    for s in summaries:
        cells = [fmt.format(s[name]) if name in s else "-" for name, fmt, _ in COLUMNS]
        lines.append("  ".join(f"{c:>{w}s}" for c, (_, _, w) in zip(cells, COLUMNS)))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ccq-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="demo", help="a named run (demo, smoke) or a YAML file")
    p.add_argument("--workdir", default=None, help="where checkpoints, metrics and plots go (default runs/<config>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. optim.lr=1e-3 or model.hidden_size=128 (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    try:
        runs = load_config(a.config, parse_overrides(a.overrides))
    except ValueError as err:
        p.error(str(err))
    from train.loop import train  # after argument errors, which need no JAX

    workdir = pathlib.Path(a.workdir or pathlib.Path("runs") / pathlib.Path(a.config).stem)
    summaries = []
    for run in runs:
        summaries.append(train(run, workdir / run.name if len(runs) > 1 else workdir, progress=not a.no_progress))
        if summaries[-1]["preempted"]:
            print(f"stopped by SIGTERM; run the same command again to resume from {workdir}")
            return 143
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "summary.json").write_text(json.dumps(summaries, indent=1))
    if len(runs) > 1:
        curves = {r.name: read_metrics(workdir / r.name / "metrics.jsonl") for r in runs}
        plot_curves(curves, workdir / "loss_curves.png", title=f"{a.config}: training loss")
    print()
    print(table(summaries))
    print(f"\nmetrics, checkpoints and plots: {workdir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
