"""The demo recipe's recall over seeds: `ccq-train --config mqar-tiny` once per seed, side by side.

    python benchmarks/demo_seeds.py --seeds 0-9 --jobs 2 --out results/demo/recipe_seeds_0-9.json
    python benchmarks/demo_seeds.py --seeds 1,2 --only gla-tiny,gdn-tiny --set optim.lr=1e-2 --out /tmp/lr.json

Seed s sets both the model's initialisation (`seed=s`) and the data order (`data.seed=s`; the
held-out batches follow it). Every run is a `ccq-train` process of its own, `--jobs` at a time,
sharing compiled programs through JAX's persistent cache. Writes the JSON (every run's summary
and logged metrics, the overrides, the command), a PNG of every seed's loss and recall curves
per model next to it, and prints a markdown table: recall per seed, mean and spread, and how
many seeds reached `--level`.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccq_jax.figures import pyplot, save_png  # noqa: E402
from train.metrics import read_metrics  # noqa: E402


def parse_seeds(text: str) -> list[int]:
    """'0-9' or '0,3,5' or '2-4,7' -> [ints]."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def run_seed(config: str, seed: int, overrides: list[str], only: str | None, workdir: pathlib.Path,
             cache: str, cores: set[int] | None) -> dict:
    cmd = [sys.executable, "-m", "train", "--config", config, "--workdir", str(workdir), "--no-progress",
           "--set", f"seed={seed}", "--set", f"data.seed={seed}", *(["--only", only] if only else [])]
    for item in overrides:
        cmd += ["--set", item]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, preexec_fn=pin)
    if proc.returncode:
        raise RuntimeError(f"seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    runs = json.loads((workdir / "summary.json").read_text())
    for run in runs:
        run["metrics"] = read_metrics(workdir / run["name"] / "metrics.jsonl")
    return {"seed": seed, "seconds": time.perf_counter() - start, "runs": runs}


def markdown_table(results: list[dict], level: float) -> str:
    names = [r["name"] for r in results[0]["runs"]]
    seeds = [r["seed"] for r in results]
    lines = ["| model | " + " | ".join(str(s) for s in seeds) + f" | mean | sd | >= {level:.0%} |",
             "|---" * (len(seeds) + 4) + "|"]
    for name in names:
        recalls = [next(run["eval_recall"] for run in r["runs"] if run["name"] == name) for r in results]
        sd = statistics.stdev(recalls) if len(recalls) > 1 else 0.0
        lines.append(f"| {name} | " + " | ".join(f"{x:.1%}" for x in recalls)
                     + f" | {statistics.mean(recalls):.1%} | {sd:.1%} | {sum(x >= level for x in recalls)}"
                     + f"/{len(recalls)} |")
    return "\n".join(lines)


def plot(results: list[dict], out_png: pathlib.Path, title: str):
    plt = pyplot()

    names = [r["name"] for r in results[0]["runs"]]
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5.5), sharex=True, squeeze=False)
    for col, name in enumerate(names):
        for r in results:
            rows = next(run["metrics"] for run in r["runs"] if run["name"] == name)
            steps = [m["step"] for m in rows]
            axes[0, col].plot(steps, [m["loss"] for m in rows], lw=1, label=str(r["seed"]))
            axes[1, col].plot(steps, [m.get("recall", float("nan")) for m in rows], lw=1)
        axes[0, col].set_title(name)
        axes[1, col].set_xlabel("step")
        axes[1, col].set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("training loss (scored positions)")
    axes[1, 0].set_ylabel("training-batch recall")
    axes[0, -1].legend(title="seed", fontsize=6, ncol=2)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_png(fig, out_png, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="mqar-tiny",
                   help="a named run or YAML file, as for ccq-train, one run per model (its seeds are set here)")
    p.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a ccq-train override applied to every run (repeatable)")
    p.add_argument("--only", default=None, metavar="NAME,NAME", help="only these runs of the config")
    p.add_argument("--jobs", type=int, default=1,
                   help="ccq-train processes at a time; with more than one, each is pinned to cores of its own (two "
                        "unpinned processes on 2 cores take longer than one after the other)")
    p.add_argument("--level", type=float, default=0.9, help="the recall that counts as learned")
    p.add_argument("--out", required=True, help="the JSON to write (the PNG goes beside it)")
    p.add_argument("--workdir", default=None, help="default: runs/demo_seeds/<out's stem>")
    a = p.parse_args(argv)
    out = pathlib.Path(a.out)
    workdir = pathlib.Path(a.workdir or pathlib.Path("runs/demo_seeds") / out.stem)
    cache = str(pathlib.Path(os.environ.get("JAX_COMPILATION_CACHE_DIR", workdir / "jax_cache")).resolve())
    seeds = parse_seeds(a.seeds)
    start = time.perf_counter()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    share = [set(cores[j::a.jobs]) if a.jobs > 1 and len(cores) >= a.jobs else None for j in range(a.jobs)]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(run_seed, a.config, s, a.overrides, a.only, workdir / f"seed{s}", cache,
                               share[i % a.jobs]) for i, s in enumerate(seeds)]
        results = []
        for future in futures:
            results.append(future.result())
            print(f"seed {results[-1]['seed']}: " + ", ".join(
                f"{run['name']} {run['eval_recall']:.1%}" for run in results[-1]["runs"])
                + f" ({results[-1]['seconds']:.0f} s)", flush=True)
    command = " ".join(["python", "benchmarks/demo_seeds.py", *(sys.argv[1:] if argv is None else argv)])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": a.config, "overrides": a.overrides, "seeds": seeds, "level": a.level,
                               "command": command, "seconds": time.perf_counter() - start,
                               "results": results}, indent=1))
    plot(results, out.with_suffix(".png"), f"{a.config} {' '.join(a.overrides)}: seeds {a.seeds}")
    print()
    print(markdown_table(results, a.level))
    print(f"\n{out} and {out.with_suffix('.png')} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
