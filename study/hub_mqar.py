"""Hub-key MQAR: a recall task where the CCQ read has a lever its backbone lacks, with its isotropic control.

    python -m study.hub_mqar run --out results/hub_mqar/runs.jsonl [--families gla,ccq-gla] [--steps 3000]
        [--seq-len 256 --pairs 64 --needles 16 --batch 128 --needle-order random] [--hubs 1,2,4,48] [--seeds 0,1,2]
        [--width 64] [--rates 0.00215]
    python -m study.hub_mqar table results/hub_mqar/runs.jsonl [more.jsonl ...] --plot results/hub_mqar/needle_accuracy.png

The task (`MQARConfig.hub_keys`, train/data/synthetic.py): T = 256 tokens, 64 key-value pairs in a random
order, then a query region. 16 needle pairs have keys of their own and are the only ones queried and scored;
the 48 distractor pairs are keyed by m hub tokens drawn fresh for every example, so no parameter can cancel
them. m in `HUBS`: 1, 2, 4 make the key covariance anisotropic along the hubs (the premise of CCQ: the bulk of
memory in a few directions, the needles outside them); m = 48 gives every distractor its own key, the
isotropic control with the same number of writes. Same seed, same needles, values and positions in every
condition: only the hub assignment differs.

Models: `FAMILIES` at width 64, 2 layers, one head of 64, short convolutions on the linear models (Zoology's
attention-free recipe, `study.mqar_sweep.model_overrides`), the XLA chunked form (`--impl`) for every read,
AdamW at 2.15e-3 (`RATES`: the rate of Zoology's four that trained best in 5 of the 6 width-64 T256-kv16 runs
of results/mqar/sweep.jsonl; one rate keeps a family's 12 members in about a minute of an H200).
Every (m, seed, learning rate) of a family trains side by side in one compiled program (`jax.vmap`, as
`study.mqar_sweep` does for rates): seed s initialises the model and draws the training pool; the test pool
is seed s + `HELD_OUT_SEED_OFFSET` of the same condition. Per member one JSON line: needle accuracy on
`TEST_EXAMPLES` test examples, with CCQ as trained and with CCQ off (`ccq.mode = "off"`, same weights), the
final training loss, and for CCQ models the read's engagement (`ccq_jax.engagement`) on 64 test rows, the needle queries
as positions. A family already in `--out` at the same steps and task shape is skipped, so an interrupted run
resumes. The task's shape (T, pairs, needles, batch) defaults to the constants below and is a row's fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.engagement import read_engagement
from ccq_jax.figures import pyplot, save_png
from ccq_jax.models import abstract_model
from ccq_jax.models.config import apply_overrides
from study.mqar_sweep import (EVAL_BATCH, HELD_OUT_SEED_OFFSET, LEARNING_RATES, VOCAB, model_overrides,
                              names_argument, train_members)
from train.config import TrainConfig
from train.data.config import NEEDLE_ORDERS, DataConfig, MQARConfig
from train.data.synthetic import SyntheticBatches
from train.optim import OptimConfig
from train.sharding import make_mesh
from train.step import compile_synthetic_eval, make_eval_step, split_model

SEQ_LEN, PAIRS, NEEDLES, BATCH, WIDTH = 256, 64, 16, 128, 64
HUBS = (1, 2, 4, PAIRS - NEEDLES)
SEEDS = (0, 1, 2)
RATES = LEARNING_RATES[2:3]
TEST_EXAMPLES = 1000
ENGAGEMENT_ROWS = 64
FAMILIES = {  # name: (the preset family, CCQ overrides)
    "transformer": ("transformer", {}),
    "gla": ("gla", {}),
    "ccq-gla": ("ccq-gla", {}),
    "ccq-gla-uncentered": ("ccq-gla", {"ccq.centered": False}),
    "ccq-gla-cg": ("ccq-gla", {"ccq.read": "cg", "ccq.iterations": 4, "ccq.lambda_max": 16.0}),
    "ccq-gla-neumann": ("ccq-gla", {"ccq.read": "neumann", "ccq.terms": 3}),
    "gdn": ("gdn", {}),
    "ccq-gdn": ("ccq-gdn", {}),
}


@dataclasses.dataclass(frozen=True)
class Shape:
    """The task's sequence length, pairs, needles (the rest are distractors), rows per member and step, and the
    needles' layout (`MQARConfig.needle_order`)."""

    seq_len: int = SEQ_LEN
    pairs: int = PAIRS
    needles: int = NEEDLES
    batch: int = BATCH
    needle_order: str = "random"


def run_config(family: str, steps: int, impl: str, shape: Shape = Shape(), width: int = WIDTH) -> TrainConfig:
    """The training run of one family at `width` (the data's seed and m are set per member)."""
    base, ccq = FAMILIES[family]
    data = DataConfig(source="mqar", seq_len=shape.seq_len, batch_size=shape.batch,
                      mqar=MQARConfig(vocab_size=VOCAB, num_kv_pairs=shape.pairs, num_needles=shape.needles,
                                      hub_keys=1, needle_order=shape.needle_order,
                                      power_a=0.01, random_non_queries=False, num_examples=100_000))
    optim = OptimConfig(lr=1.0, warmup_steps=min(100, steps // 10), schedule="cosine", min_lr_ratio=0.1,
                        weight_decay=0.1, grad_clip=1.0)
    return TrainConfig(name=f"hub-mqar-{family}", model=f"{base}-tiny",
                       model_overrides={**model_overrides(base, width, impl), **ccq}, data=data, optim=optim,
                       steps=steps, checkpoint_every=0, eval_batches=0)


@dataclasses.dataclass(frozen=True)
class Members:
    """The (m, seed, rate) of each member, in that nesting order."""

    hubs: tuple
    seeds: tuple
    rates: tuple

    @property
    def rows(self) -> list[tuple[int, int, float]]:
        return [(m, s, lr) for m in self.hubs for s in self.seeds for lr in self.rates]

    def arrays(self):
        rows = self.rows
        return (jnp.asarray([m for m, _, _ in rows], jnp.int32), jnp.asarray([s for _, s, _ in rows], jnp.int32),
                [lr for *_, lr in rows])


def train_family(family: str, members: Members, steps: int, impl: str, shape: Shape = Shape(),
                 steps_per_call: int = 100, test_examples: int = TEST_EXAMPLES, width: int = WIDTH) -> list[dict]:
    """Train every member of one family side by side; one result dict per member (`Members.rows` order)."""
    cfg = run_config(family, steps, impl, shape, width)
    mesh = make_mesh(cfg.mesh)
    data = SyntheticBatches(cfg.data)
    hubs, seeds, rates = members.arrays()
    make_batch = lambda step: jax.vmap(lambda s, m: data.batch(step, s, m))(seeds, hubs)
    graphdef, others, state, mcfg, last, train_s = train_members(
        cfg, rates, steps_per_call, seeds=[s for _, s, _ in members.rows], make_batch=make_batch, desc=family)

    test_batch = lambda i: jax.vmap(lambda s, m: data.examples(i * EVAL_BATCH + jnp.arange(EVAL_BATCH),
                                                               s + HELD_OUT_SEED_OFFSET, m))(seeds, hubs)
    accuracy = {}
    variants = {"on": mcfg} if getattr(mcfg, "ccq", None) is None else {
        "on": mcfg, "off": apply_overrides(mcfg, {"ccq.mode": "off"})}
    for name, variant in variants.items():
        variant_graph = split_model(abstract_model(variant))[0]
        evaluate = compile_synthetic_eval(jax.vmap(make_eval_step(variant_graph, others), in_axes=(0, 0)), state,
                                          mesh, test_batch, test_examples // EVAL_BATCH)
        sums = jax.device_get(evaluate(state.params))
        accuracy[name] = sums["recall_correct"] / sums["recall_scored"]
    engagement = _engagement(graphdef, others, state, test_batch(0), len(rates)) if "off" in variants else None
    return [{"lr": lr, "hubs": m, "seed": s, "test_accuracy": float(accuracy["on"][i]),
             "test_accuracy_ccq_off": float(accuracy["off"][i]) if "off" in accuracy else None,
             "final_train_loss": float(last["loss"][i]), "train_s": train_s,
             "engagement": None if engagement is None else engagement[i]}
            for i, (m, s, lr) in enumerate(members.rows)]


def _engagement(graphdef, others, state, batch, count) -> list[dict]:
    """Each member's read engagement (`ccq_jax.engagement`) on the first rows of its test batch, the needle queries as
    positions: the summary and, per layer, the mean over heads."""
    out = []
    for i in range(count):
        model = nnx.merge(graphdef, jax.tree.map(lambda x: x[i], state.params), others)
        report = read_engagement(model, batch["input_ids"][i, :ENGAGEMENT_ROWS],
                                 positions=batch["loss_mask"][i, :ENGAGEMENT_ROWS])
        per_layer = {name: [float(np.mean(layer["heads"][name])) for layer in report["layers"]]
                     for name in ("lambda_mean", "applied_at_positions", "available_at_positions", "effective_rank")}
        out.append({**report["summary"], "per_layer": per_layer})
    return out


def shape_of(row) -> Shape:
    """A row's task shape (rows written before the shape was recorded have the defaults)."""
    return Shape(**{f.name: row.get(f.name, f.default) for f in dataclasses.fields(Shape)})


def _done(out: pathlib.Path) -> set:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    return {(r["family"], r["steps"], shape_of(r), r.get("width", WIDTH)) for r in rows}


def run(out: pathlib.Path, families, members: Members, steps: int, impl: str, shape: Shape = Shape(),
        width: int = WIDTH) -> int:
    """Train every family not yet in `out` at `steps`, `shape` and `width`, appending its members' rows; returns
    how many trained."""
    out.parent.mkdir(parents=True, exist_ok=True)
    todo = [f for f in families if (f, steps, shape, width) not in _done(out)]
    for family in todo:
        rows = train_family(family, members, steps, impl, shape, width=width)
        with out.open("a") as f:
            for row in rows:
                f.write(json.dumps({"family": family, "steps": steps, "width": width, "impl": impl,
                                    **dataclasses.asdict(shape),
                                    "device": jax.devices()[0].device_kind, **row}) + "\n")
        print(summary_line(family, rows), flush=True)
    return len(todo)


def best_over_rates(rows) -> dict:
    """{(family, steps, width, hubs, seed): the row of the best test accuracy over the rates}."""
    best = {}
    for r in rows:
        key = (r["family"], r["steps"], r.get("width", WIDTH), r["hubs"], r["seed"])
        if key not in best or r["test_accuracy"] > best[key]["test_accuracy"]:
            best[key] = r
    return best


def summary_line(family: str, rows) -> str:
    best = best_over_rates([{**r, "family": family, "steps": 0} for r in rows])
    cells = []
    for m in sorted({r["hubs"] for r in rows}):
        acc = [b["test_accuracy"] for (*_, hubs, _), b in best.items() if hubs == m]
        cells.append(f"m={m}: {100 * np.mean(acc):.1f}%")
    return f"{family:>20s} " + ", ".join(cells) + f" ({rows[0]['train_s']:.0f} s)"


def table(rows) -> str:
    """Markdown: per family, width and m, needle accuracy (best over the rates) mean +- sd over seeds and each
    seed; CCQ off on the same checkpoints; the read's applied contraction at the needle queries and mean lambda."""
    best = best_over_rates(rows)
    lines = ["| family | steps | width | m | seeds | needle accuracy % (mean +- sd) | per seed | CCQ off % | lambda | "
             "applied at queries | eig_max | eff. rank |", "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    keys = sorted({k[:4] for k in best}, key=lambda k: (list(FAMILIES).index(k[0]), *k[1:]))
    for family, steps, width, m in keys:
        runs = [best[k] for k in sorted(best) if k[:4] == (family, steps, width, m)]
        acc = np.array([100 * r["test_accuracy"] for r in runs])
        off = [100 * r["test_accuracy_ccq_off"] for r in runs if r["test_accuracy_ccq_off"] is not None]
        eng = [r["engagement"] for r in runs if r["engagement"] is not None]
        mean = lambda name: f"{np.mean([e[name] for e in eng]):.3g}" if eng else "-"
        pct = lambda name: f"{100 * np.mean([e[name] for e in eng]):.2f} %" if eng else "-"
        lines.append(f"| {family} | {steps} | {width} | {m} | {', '.join(str(r['seed']) for r in runs)} | "
                     f"{acc.mean():.1f} +- {acc.std(ddof=1) if len(acc) > 1 else 0:.1f} | "
                     f"{' / '.join(f'{a:.1f}' for a in acc)} | {f'{np.mean(off):.1f}' if off else '-'} | "
                     f"{mean('lambda_mean')} | {pct('applied_at_positions')} | {mean('sigma_top1')} | "
                     f"{mean('effective_rank')} |")
    return "\n".join(lines)


def plot(rows, path: pathlib.Path) -> pathlib.Path:
    """Needle accuracy against m (log axis; the control at the right), one line per family through the seed
    mean, each seed a dot; a family's line breaks where it has no rows."""
    plt = pyplot()

    best = best_over_rates(rows)
    conditions = sorted({k[3] for k in best})
    fig, ax = plt.subplots(figsize=(8.5, 4))
    for family, width in sorted({k[0:3:2] for k in best}, key=lambda fw: (list(FAMILIES).index(fw[0]), fw[1])):
        mine = {k: b for k, b in best.items() if k[0] == family and k[2] == width}
        per = {m: [100 * b["test_accuracy"] for k, b in mine.items() if k[3] == m] for m in conditions}
        line, = ax.plot(conditions, [np.mean(per[m]) if per[m] else np.nan for m in conditions], marker="o",
                        label=f"{family} (width {width})")
        for m in conditions:
            ax.scatter([m] * len(per[m]), per[m], s=10, color=line.get_color(), alpha=0.5)
    shape = shape_of(rows[0])
    distractors = shape.pairs - shape.needles
    ax.set(xscale="log", xlabel=f"hub keys m ({distractors}: every distractor its own key)",
           ylabel="needle accuracy (%)",
           title=f"Hub-key MQAR, T = {shape.seq_len}, {shape.needles} needles among {distractors} distractor pairs")
    ax.set_xticks(conditions, [str(m) for m in conditions])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return save_png(fig, path)


def _ints(text: str) -> tuple:
    return tuple(int(x) for x in text.split(",") if x)


def _floats(text: str) -> tuple:
    return tuple(float(x) for x in text.split(",") if x)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="train the families not yet in --out")
    go.add_argument("--out", required=True, type=pathlib.Path, help="JSON lines, appended")
    go.add_argument("--families", type=lambda t: names_argument(t, FAMILIES), default=tuple(FAMILIES))
    go.add_argument("--hubs", type=_ints, default=None, help="m of each condition (default 1,2,4 and the control)")
    go.add_argument("--seq-len", type=int, default=SEQ_LEN)
    go.add_argument("--pairs", type=int, default=PAIRS)
    go.add_argument("--needles", type=int, default=NEEDLES)
    go.add_argument("--batch", type=int, default=BATCH, help="rows per member and step")
    go.add_argument("--needle-order", choices=NEEDLE_ORDERS, default="random",
                    help="written: needle i before needle i + 1, as MQAR writes its pairs")
    go.add_argument("--seeds", type=_ints, default=SEEDS)
    go.add_argument("--steps", type=int, default=2000)
    go.add_argument("--impl", default="chunk", help="kernel.impl of the linear models")
    go.add_argument("--width", type=int, default=WIDTH, help="model width (one head per 64 features)")
    go.add_argument("--rates", type=_floats, default=RATES,
                    help=f"learning rates trained side by side (default {RATES[0]:.3g}; Zoology's four: "
                         f"{','.join(f'{r:.3g}' for r in LEARNING_RATES)})")
    show = sub.add_parser("table", help="the table (and a plot) of the rows of one or more runs' files")
    show.add_argument("rows", type=pathlib.Path, nargs="+")
    show.add_argument("--plot", type=pathlib.Path, default=None)
    a = p.parse_args(argv)
    if a.command == "run":
        if a.steps < 1:
            p.error(f"--steps: expected >= 1, got {a.steps}")
        shape = Shape(a.seq_len, a.pairs, a.needles, a.batch, a.needle_order)
        hubs = a.hubs or (1, 2, 4, a.pairs - a.needles)
        run(a.out, a.families, Members(hubs, a.seeds, a.rates), a.steps, a.impl, shape, a.width)
        return 0
    missing = [str(path) for path in a.rows if not path.is_file()]
    if missing:
        p.error(f"rows: no such file: {', '.join(missing)}")
    rows = [json.loads(line) for path in a.rows for line in path.read_text().splitlines() if line.strip()]
    print(table(rows))
    if a.plot is not None:
        print(f"needle accuracy against m: {plot(rows, a.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
