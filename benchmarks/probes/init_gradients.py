"""Gradient norms at initialisation, by parameter group, for the runs of a training config.

    python benchmarks/probes/init_gradients.py --config mqar-tiny --seeds 0-2 --out results/demo/init_gradients.json
    python benchmarks/probes/init_gradients.py --set model.initializer_range=0.02

For each run and seed: a fresh model (the run's preset and overrides, seed s), the mean loss over the
scored positions of its first training batch, and the global norm of that loss's gradient over each
group of parameters: the mixer's q/k/v projections and short convolutions, the rest of the mixer, the
MLPs, and the embedding, head and norms. Prints the mean over seeds and writes every value as JSON.
A mixer whose group norm is orders of magnitude below the others' starts on a plateau (docs/records/learning-2026-12.md).
"""

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.demo_seeds import parse_seeds  # noqa: E402
from ccq_jax.configlib import parse_overrides  # noqa: E402
from ccq_jax.models import CausalLM  # noqa: E402
from train.config import fit_vocab  # noqa: E402
from train.data import build_pipeline  # noqa: E402
from train.runs import load_config  # noqa: E402
from train.sharding import host_batch_to_global, make_mesh  # noqa: E402
from train.step import lm_loss, split_model  # noqa: E402

GROUPS = (("mixer q/k/v + conv", re.compile(r"attn/[qkv]_(proj|conv1d)/")), ("mixer other", re.compile(r"attn/")),
          ("mlp", re.compile(r"mlp/")), ("embed/head/norms", re.compile(r"")))


def group_of(path: str) -> str:
    return next(name for name, pattern in GROUPS if pattern.search(path))


def group_norms(run, seed: int) -> dict[str, float]:
    pipeline = build_pipeline(run.data)
    batch = (pipeline.synthetic.batch(jnp.int32(0)) if pipeline.synthetic is not None
             else host_batch_to_global(next(iter(pipeline.dataset)), make_mesh(run.mesh)))
    graphdef, params, others = split_model(CausalLM(fit_vocab(run, pipeline.vocab_size), rngs=nnx.Rngs(seed)))

    def mean_loss(p):
        total, (tokens, _, _) = lm_loss(graphdef, p, others, batch)
        return total / tokens

    squares = {}
    for path, g in jax.tree_util.tree_flatten_with_path(jax.grad(mean_loss)(params))[0]:
        name = "/".join(str(getattr(k, "key", k)) for k in path) + "/"
        squares[group_of(name)] = squares.get(group_of(name), 0.0) + float(jnp.sum(g.astype(jnp.float32) ** 2))
    return {name: squares.get(name, 0.0) ** 0.5 for name, _ in GROUPS}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="mqar-tiny")
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=None, help="a JSON file for every value")
    a = p.parse_args(argv)
    runs = load_config(a.config, parse_overrides(a.overrides))
    seeds = parse_seeds(a.seeds)
    results = {run.name: {s: group_norms(run, s) for s in seeds} for run in runs}
    names = [name for name, _ in GROUPS]
    print(f"gradient norm at initialisation, mean over seeds {a.seeds} ({' '.join(a.overrides) or 'no overrides'})")
    print("| run | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for run, by_seed in results.items():
        means = [sum(v[n] for v in by_seed.values()) / len(by_seed) for n in names]
        print(f"| {run} | " + " | ".join(f"{m:.2e}" for m in means) + " |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"config": a.config, "overrides": a.overrides, "seeds": seeds,
                                                   "command": " ".join(["python", "benchmarks/probes/init_gradients.py",
                                                                        *(sys.argv[1:] if argv is None else argv)]),
                                                   "norms": results}, indent=1))


if __name__ == "__main__":
    main()
