"""MQAR at the Zoology protocol's scale of this project: accuracy against model width, per family and cell.

    python -m study.mqar_sweep run --out results/mqar/sweep.jsonl [--families gla,ccq-gla] [--widths 64,128]
    python -m study.mqar_sweep plot results/mqar/sweep.jsonl --out results/mqar/accuracy_vs_width.png
    python -m study.mqar_sweep run --out results/mqar/sweep.jsonl --families gdn --widths 64 --seed 1  # a rerun

Zoology (Arora et al. 2023, figure 2) trains 2-layer models of width 64-512 on multi-query associative
recall with a vocabulary of 8192, key-value pairs placed at power-law gaps (a = 0.01), queries and
zeros in between, 100K training and 3K test examples, and a sweep of four learning rates per cell,
reporting the best. Here: the cells of `CELLS` (sequence length, pairs, batch), the families of
`FAMILIES` (the softmax Transformer as the reference), widths of `WIDTHS`, rates `LEARNING_RATES`.
The test set is the first `TEST_EXAMPLES` examples of the held-out pool (the data seed + 1,000,003,
as `ccq-train` evaluates), scored by argmax accuracy on the recalled values.

The rates of one (family, width, cell) train side by side in one compiled program: the models start
from the same initialisation, `jax.vmap` runs their steps on the same batches, and the optimizer is
the run's AdamW schedule at a peak of 1 followed by a per-model scale (`member_learning_rates`), so
member i is AdamW at LEARNING_RATES[i] exactly (the weight decay is scaled by the rate too, as in
`optax.adamw`). One JSON line per (family, width, cell, rate) is appended to `--out`; cells already
there are skipped, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ccq_jax.figures import pyplot, save_png
from ccq_jax.models import count_params
from ccq_jax.progress import progress
from train.config import TrainConfig
from train.data.config import DataConfig, MQARConfig
from train.data.synthetic import SyntheticBatches
from train.optim import OptimConfig, make_optimizer
from train.sharding import make_mesh, with_ops_axes
from train.step import build_train_call, compile_synthetic_eval, init_state, make_eval_step

CELLS = {"T256-kv16": (256, 16, 256), "T512-kv64": (512, 64, 128)}  # (sequence length, pairs, batch)
FAMILIES = ("transformer", "gla", "ccq-gla", "gdn", "ccq-gdn")
WIDTHS = (64, 128, 256)
LEARNING_RATES = tuple(float(x) for x in np.logspace(-4, -2, 4))
TEST_EXAMPLES = 3000
EVAL_BATCH = 200
VOCAB = 8192
HELD_OUT_SEED_OFFSET = 1_000_003  # as train.loop evaluates: the data seed plus this


def member_learning_rates(rates) -> optax.GradientTransformation:
    """Scales updates by a learning rate kept in the optimizer state: `init` gives rates[0]; a vmapped stack of
    states takes one rate per member (`stack_members`)."""
    first = jnp.asarray(rates[0], jnp.float32)
    return optax.GradientTransformation(
        lambda params: first,
        lambda updates, lr, params=None: (jax.tree.map(lambda u: (lr * u).astype(u.dtype), updates), lr))


def stack_members(states, rates):
    """One state per member (e.g. the same state once per rate, or one initialisation per seed) stacked on a new
    leading axis (the step counter stays shared, the first state's), each member's optimizer scale set to its
    rate."""
    params, opt_state = jax.tree.map(lambda *x: jnp.stack(x), *[(s.params, s.opt_state) for s in states])
    opt_state = (*opt_state[:-1], jnp.asarray(rates, jnp.float32))
    return states[0]._replace(params=params, opt_state=opt_state)


def model_overrides(family: str, width: int, impl: str) -> dict:
    """2 layers of `width`, one head per 64 features; on the linear models `impl` and short convolutions
    (Zoology's attention-free models have them); the MQAR vocabulary. The Transformer keeps its XLA attention."""
    heads = max(1, width // 64)
    fields = {"hidden_size": width, "num_hidden_layers": 2, "num_heads": heads, "vocab_size": VOCAB}
    if family != "transformer":
        fields.update({"kernel.impl": impl, "use_short_conv": True})
    if family.endswith("gdn"):
        fields["head_dim"] = width // heads
    return fields


def run_config(family: str, width: int, cell: tuple[int, int, int], steps: int, impl: str, seed: int) -> TrainConfig:
    """The training run of one (family, width) on a cell (sequence length, pairs, batch)."""
    seq_len, pairs, batch = cell
    data = DataConfig(source="mqar", seq_len=seq_len, batch_size=batch, seed=seed,
                      mqar=MQARConfig(vocab_size=VOCAB, num_kv_pairs=pairs, power_a=0.01, random_non_queries=False,
                                      num_examples=100_000))
    optim = OptimConfig(lr=1.0, warmup_steps=min(100, steps // 10), schedule="cosine", min_lr_ratio=0.1,
                        weight_decay=0.1, grad_clip=1.0)
    return TrainConfig(name=f"{family}-w{width}-T{seq_len}-kv{pairs}", model=f"{family}-tiny",
                       model_overrides=model_overrides(family, width, impl), data=data, optim=optim, steps=steps,
                       seed=seed, checkpoint_every=0, eval_batches=0)


def member_train_calls(cfg: TrainConfig, rates, steps_per_call: int = 50, *, seeds=None, make_batch=None):
    """One model per member, stacked, and the compiled call that trains them side by side. Member i trains at
    rates[i] from the initialisation of seeds[i] (None: cfg.seed for every member) on make_batch(step), a batch
    with a leading member axis (None: the config's batches, the same for every member).

    Returns (graphdef, others, state with a leading member axis on params and optimizer state, the model config
    (its ops splitting the mesh as the train call's, `train.sharding.with_ops_axes`),
    `run(state, n) -> (state, metrics [steps_per_call, members])`, which trains n <= steps_per_call steps).

    The run's own train call (`train.step.build_train_call`, the first member's seed) with the members' states
    stacked and its step vmapped over them."""
    mesh = make_mesh(cfg.mesh)
    seeds = [cfg.seed] * len(rates) if seeds is None else list(seeds)
    cfg = dataclasses.replace(cfg, seed=seeds[0], steps_per_call=steps_per_call)
    optimizer = optax.chain(make_optimizer(cfg.optim, cfg.steps), member_learning_rates(rates))

    def members(graphdef, others, first, step):
        inits = {seeds[0]: first, **{s: init_state(cfg.model_config, optimizer, mesh, s)[2]
                                     for s in dict.fromkeys(seeds) if s != seeds[0]}}
        state = stack_members([inits[s] for s in seeds], rates)
        axes = type(state)(0, 0, None)
        return state, jax.vmap(step, in_axes=(axes, None if make_batch is None else 0), out_axes=(axes, 0))

    built = build_train_call(cfg, mesh, make_batch=SyntheticBatches(cfg.data).batch if make_batch is None else
                             make_batch, optimizer=optimizer, wrap=members)
    return built.graphdef, built.others, built.state, with_ops_axes(cfg.model_config), built.run


def train_members(cfg: TrainConfig, rates, steps_per_call: int = 50, *, seeds=None, make_batch=None, desc=None):
    """Train the members of `member_train_calls` side by side for cfg.steps steps (a progress bar named `desc`
    when given).

    Returns (graphdef, others, state with a leading member axis on params and optimizer state, the model config,
    the last step's metrics [members], seconds of training)."""
    graphdef, others, state, mcfg, run = member_train_calls(cfg, rates, steps_per_call, seeds=seeds,
                                                            make_batch=make_batch)
    begin, done, last = time.perf_counter(), 0, None
    with progress(total=cfg.steps, desc=desc, unit="step", disable=desc is None) as bar:
        while done < cfg.steps:
            n = min(steps_per_call, cfg.steps - done)
            state, metrics = run(state, jnp.int32(n))
            last = jax.tree.map(lambda m: np.asarray(m)[n - 1], metrics)
            done += n
            bar.update(n)
    return graphdef, others, state, mcfg, last, time.perf_counter() - begin


def train_cell(cfg: TrainConfig, rates, steps_per_call: int = 50) -> list[dict]:
    """Train one model per rate side by side and score each on the test set; one result row per rate."""
    graphdef, others, state, mcfg, last, train_s = train_members(cfg, rates, steps_per_call)
    held_out = SyntheticBatches(dataclasses.replace(cfg.data, seed=cfg.data.seed + HELD_OUT_SEED_OFFSET))
    test_batch = lambda i: held_out.examples(i * EVAL_BATCH + jnp.arange(EVAL_BATCH))
    evaluate = compile_synthetic_eval(jax.vmap(make_eval_step(graphdef, others), in_axes=(0, None)), state,
                                      make_mesh(cfg.mesh), test_batch, TEST_EXAMPLES // EVAL_BATCH)
    sums = jax.device_get(evaluate(state.params))
    return [{"lr": lr, "final_train_loss": float(last["loss"][i]),
             "test_loss": float(sums["loss_sum"][i] / sums["tokens"][i]),
             "test_accuracy": float(sums["recall_correct"][i] / sums["recall_scored"][i]),
             "params": count_params(mcfg), "train_s": train_s} for i, lr in enumerate(rates)]


def _done(out: pathlib.Path) -> set:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    return {(r["family"], r["width"], r["cell"], r["steps"], r["seed"]) for r in rows}


def sweep(out: pathlib.Path, families, widths, cells, rates, steps: int, impl: str, seed: int) -> int:
    """Train every (family, width, cell) not yet in `out`, appending its rows; returns the number trained."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    todo = [(f, w, c) for c in cells for w in widths for f in families if (f, w, c, steps, seed) not in done]
    for family, width, cell in progress(todo, desc="mqar sweep", unit="cell"):
        rows = train_cell(run_config(family, width, CELLS[cell], steps, impl, seed), rates)
        with out.open("a") as f:
            for row in rows:
                f.write(json.dumps({"family": family, "width": width, "cell": cell, "steps": steps, "seed": seed,
                                    "impl": impl, "device": jax.devices()[0].device_kind, **row}) + "\n")
        best = max(rows, key=lambda r: r["test_accuracy"])
        print(f"{family:>12s} width {width:4d} {cell}: best test accuracy {best['test_accuracy']:.1%} at lr "
              f"{best['lr']:.2e} ({best['train_s']:.0f} s)", flush=True)
    return len(todo)


def best_per_cell(rows) -> dict:
    """{(cell, steps, family): {width: {seed: best test accuracy over the rates}}}: seeds and training budgets
    are kept apart, never maximised over."""
    best = {}
    for r in rows:
        seeds = best.setdefault((r["cell"], r["steps"], r["family"]), {}).setdefault(r["width"], {})
        seeds[r["seed"]] = max(seeds.get(r["seed"], 0.0), r["test_accuracy"])
    return best


def _panels(best) -> list:
    """(cell, steps) of the rows, by sequence length then budget."""
    return sorted({(c, s) for c, s, _ in best}, key=lambda p: (CELLS.get(p[0], (0,))[0], p[0], p[1]))


def table(rows) -> str:
    """Markdown: per cell, training steps, family and width the best test accuracy over the rates, one number
    per seed in seed order ("0.1 / 99.9": seed 0, then seed 1)."""
    best = best_per_cell(rows)
    widths = sorted({w for v in best.values() for w in v})
    lines = ["| cell | steps | family | seeds | " + " | ".join(f"width {w}" for w in widths) + " |",
             "|---|---:|---|---|" + "---:|" * len(widths)]
    for cell, steps in _panels(best):
        for family in [f for f in FAMILIES if (cell, steps, f) in best]:
            by_width = best[(cell, steps, family)]
            seeds = sorted({s for v in by_width.values() for s in v})
            cells = [" / ".join(f"{100 * by_width[w][s]:.1f}" if s in by_width.get(w, {}) else "-" for s in seeds)
                     if w in by_width else "-" for w in widths]
            lines.append(f"| {cell} | {steps} | {family} | {', '.join(map(str, seeds))} | " + " | ".join(cells)
                         + " |")
    return "\n".join(lines)


def plot(rows, path: pathlib.Path) -> pathlib.Path:
    """Accuracy against width, one panel per cell and training budget, one line per family through the mean
    over seeds, each seed's best accuracy a dot (Zoology's figure 2)."""
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter

    best = best_per_cell(rows)
    panels = _panels(best)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (cell, steps) in zip(axes[0], panels):
        for i, family in enumerate([f for f in FAMILIES if (cell, steps, f) in best]):
            by_width = best[(cell, steps, family)]
            widths = sorted(by_width)
            line, = ax.plot(widths, [100 * np.mean(list(by_width[w].values())) for w in widths], marker="o",
                            label=family)
            for w in widths:  # each seed, nudged sideways so that families do not hide each other
                ax.scatter([w * 1.03 ** (i - 2)] * len(by_width[w]), [100 * a for a in by_width[w].values()],
                           s=12, color=line.get_color(), alpha=0.5)
        ax.set(xscale="log", xlabel="model width", ylabel="test accuracy (%)", title=f"{cell}, {steps} steps",
               ylim=(-2, 102))
        ticks = sorted({w for (c, s, _), v in best.items() if (c, s) == (cell, steps) for w in v})
        ax.set_xticks(ticks)
        ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
        ax.minorticks_off()
        ax.get_xaxis().set_major_formatter(ScalarFormatter())
        ax.grid(alpha=0.3)
    max(axes[0], key=lambda ax: len(ax.get_lines())).legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, path)


def names_argument(text: str, choices) -> tuple:
    """The comma-separated names of `text`, each one of `choices` (an argparse type)."""
    names = tuple(x for x in text.split(",") if x)
    for name in names:
        if name not in choices:
            raise argparse.ArgumentTypeError(f"expected names from {list(choices)}, got {name!r}")
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the cells not yet in --out")
    run.add_argument("--out", required=True, type=pathlib.Path, help="JSON lines, appended")
    run.add_argument("--families", type=lambda t: names_argument(t, FAMILIES), default=FAMILIES)
    run.add_argument("--widths", type=lambda t: tuple(int(x) for x in t.split(",")), default=WIDTHS)
    run.add_argument("--cells", type=lambda t: names_argument(t, CELLS), default=tuple(CELLS))
    run.add_argument("--steps", type=int, default=2000)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--impl", default="pallas", help="kernel.impl of the linear models (chunk on a CPU)")
    show = sub.add_parser("plot", help="accuracy against width from a sweep's rows")
    show.add_argument("rows", type=pathlib.Path)
    show.add_argument("--out", required=True, type=pathlib.Path)
    a = p.parse_args(argv)
    if a.command == "run":
        if a.steps < 1:
            p.error(f"--steps: expected >= 1, got {a.steps}")
        sweep(a.out, a.families, a.widths, a.cells, LEARNING_RATES, a.steps, a.impl, a.seed)
        return 0
    rows = [json.loads(line) for line in a.rows.read_text().splitlines() if line.strip()]
    print(table(rows))
    print(f"accuracy against width: {plot(rows, a.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
