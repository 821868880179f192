"""Few rows times a large weight on a GPU: XLA's GEMM against the row-matmul kernel, in GB/s of weight read.

    PYTHONPATH=. python benchmarks/lm_head.py --out lm_head.jsonl

For each `--shapes` entry rows:D:N (default: gla-1.3b's LM head [2048, 32000] at 1, 2, 16 and 64 rows, and its
decode step's other products at two rows: q/k/v/gate [2048, 6144], the MLP's gate/up [2048, 11264] and down
[5632, 2048], o [2048, 2048]), one compiled program runs `--steps` products back to back, cycling over `--copies`
distinct bf16 weights (more bytes than the GPU's L2 cache, so each product reads its weight from HBM) and feeding
a scalar of each product into the next one's rows (so XLA neither merges nor reorders them); the time per product
is the best of `--repeats` runs after a compiling one. `impl=xla` is `jnp.dot`; `pallas` is
`ccq_jax.ops.internals.head_logits(impl="pallas")` (the row padding and the K splits' sum included) at its default
tiling and, for the shapes of `--sweep` rows (default 2) of the LM head, at each column width of `--widths` and
warps of `--warps`. `gb_s` is the weight's bytes over the time; a tiling that fails to compile or run gets a
record with its `error` instead.
"""

import argparse
import itertools

import jax
import jax.numpy as jnp

from benchmarks import records
from benchmarks.timing import best_seconds
from ccq_jax.ops.internals import head_logits
from pallas_kernels.tiles import KernelConfig

DEFAULT_SHAPES = ("1:2048:32000,2:2048:32000,16:2048:32000,64:2048:32000,"
                  "2:2048:6144,2:2048:11264,2:5632:2048,2:2048:2048")


def shapes(text):
    """'rows:D:N,...' -> [(rows, D, N)]."""
    try:
        parsed = [tuple(int(v) for v in item.split(":")) for item in text.split(",")]
    except ValueError:
        parsed = []
    if not parsed or any(len(s) != 3 or min(s) < 1 for s in parsed):
        raise argparse.ArgumentTypeError(f"expected rows:D:N triples of positive integers, got {text!r}")
    return parsed


def product_program(rows, d, n, steps, copies, impl, config):
    """(jitted fn, its inputs): `steps` products of a [rows, D] input with one of `copies` [D, N] weights each."""
    kx, kw = jax.random.split(jax.random.key(0))
    xs = jax.random.normal(kx, (steps, rows, d), jnp.bfloat16)
    ws = (jax.random.normal(kw, (copies, d, n), jnp.float32) * d ** -0.5).astype(jnp.bfloat16)
    options = {} if impl == "xla" else {"interpret": None, "config": config}

    def run(xs, ws):
        feed, firsts = jnp.zeros((rows, 1), jnp.bfloat16), []
        for i in range(steps):
            y = head_logits(xs[i] + feed, ws[i % copies], impl=impl, **options)
            feed = y[:, :1] * 1e-3
            firsts.append(feed)
        return jnp.concatenate(firsts, axis=1)

    return jax.jit(run), (xs, ws)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shapes, default=shapes(DEFAULT_SHAPES))
    p.add_argument("--sweep", default="2", type=lambda s: [int(r) for r in s.split(",") if r],
                   help="rows at which the LM head (the first shape's D and N) is also timed at every tiling")
    p.add_argument("--widths", default="64,128,256", type=lambda s: [int(w) for w in s.split(",")])
    p.add_argument("--warps", default="4,8", type=lambda s: [int(w) for w in s.split(",")])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--copies", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="JSON lines, appended")
    a = p.parse_args(argv)
    if min(a.steps, a.copies, a.repeats) < 1:
        p.error("--steps, --copies and --repeats: expected >= 1")
    device = jax.devices()[0].device_kind
    head = a.shapes[0][1:]
    for rows, d, n in a.shapes:
        variants = [("xla", None), ("pallas", None)]
        if rows in a.sweep and (d, n) == head:
            variants += [("pallas", KernelConfig(width=w, num_warps=nw)) for w, nw in itertools.product(a.widths,
                                                                                                        a.warps)]
        for impl, config in variants:
            record = {"rows": rows, "d": d, "n": n, "impl": impl, "width": config and config.width,
                      "num_warps": config and config.num_warps, "device": device, "steps": a.steps,
                      "copies": a.copies}
            try:
                fn, args = product_program(rows, d, n, a.steps, a.copies, impl, config)
                us = 1e6 * best_seconds(lambda: fn(*args), a.repeats) / a.steps
                record.update(us=us, gb_s=d * n * 2 / us / 1e3)
            except Exception as err:  # a tiling the GPU cannot run (shared memory, registers) is a result too
                record.update(error=f"{type(err).__name__}: {str(err)[:300]}")
            records.append(a.out, records.show([record]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
