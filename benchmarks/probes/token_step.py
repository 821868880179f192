"""The one-token step alone on a GPU: XLA's recurrence against the one-token kernels at several tilings.

    PYTHONPATH=. python benchmarks/probes/token_step.py --out token_step.jsonl

For each op and row count at the 1.3B heads (GLA and CCQ-GLA: H = 4, K = 256, V = 512; Gated DeltaNet: H = 6), one
compiled program runs `--steps` decode steps back to back (unrolled: no host round trip between them), each feeding
its state (and statistics) to the next, bf16 q/k/v; the time per step is the best of `--repeats` runs after a
compiling one. `impl=recurrent` is what `kernel.decode_impl="recurrent"` runs (XLA's fusions), `pallas` the one-token
kernels (`pallas_kernels.recurrent_step`) at each `KernelConfig` of `--widths` and `--warps`.
"""

import argparse
import itertools

import jax
import jax.numpy as jnp

from benchmarks import records
from benchmarks.inference import best_seconds
import ccq_jax.ops as ops
from pallas_kernels.tiles import KernelConfig

HEADS = {"gla": 4, "ccq_gla": 4, "gated_delta_rule": 6}


def step_program(op, rows, steps, impl, config):
    """(jitted fn of the inputs, the inputs): `steps` one-token calls of `op`, each from the last one's state."""
    heads, dk, dv = HEADS[op], 256, 512
    key = iter(jax.random.split(jax.random.key(0), 8))
    normal = lambda *shape: jax.random.normal(next(key), (rows, steps, heads, *shape), jnp.bfloat16)
    q, k, v = normal(dk), normal(dk) / 16, normal(dv)
    g = -jax.nn.softplus(jax.random.normal(next(key), (rows, steps, heads, dk))) / 16
    g_head, gate = g[..., 0], jax.random.uniform(next(key), (rows, steps, heads))
    options = {} if impl == "recurrent" else {"config": config}

    def run(q, k, v, g, g_head, gate):
        state = jnp.zeros((rows, heads, dk, dv), jnp.float32)
        stats = ops.CCQStats(jnp.zeros((rows, heads, dk, dk)), jnp.zeros((rows, heads, dk)), jnp.ones((rows, heads)))
        outs = []
        for t in range(steps):
            at = lambda x: x[:, t:t + 1]
            if op == "gla":
                o, state = ops.gla(at(q), at(k), at(v), at(g), initial_state=state, output_final_state=True,
                                   impl=impl, **options)
            elif op == "gated_delta_rule":
                o, state = ops.gated_delta_rule(at(q), at(k), at(v), at(g_head), at(gate), initial_state=state,
                                                output_final_state=True, impl=impl, **options)
            else:
                o, (state, stats) = ops.ccq_gla(at(q), at(k), at(v), at(g), at(gate), initial_state=state,
                                                initial_stats=stats, output_final_state=True,
                                                output_final_stats=True, impl=impl, **options)
            outs.append(o)
        return jnp.concatenate(outs, axis=1), state

    return jax.jit(run), (q, k, v, g, g_head, gate)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="gla,ccq_gla,gated_delta_rule")
    p.add_argument("--rows", default="2,16", type=lambda s: [int(r) for r in s.split(",")])
    p.add_argument("--widths", default="16,32,64", type=lambda s: [int(w) for w in s.split(",")])
    p.add_argument("--warps", default="2,4,8", type=lambda s: [int(w) for w in s.split(",")])
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="JSON lines, appended")
    a = p.parse_args(argv)
    device = jax.devices()[0].device_kind
    for op, rows in itertools.product(a.ops.split(","), a.rows):
        variants = [("recurrent", None)] + [("pallas", KernelConfig(width=w, num_warps=n))
                                            for w, n in itertools.product(a.widths, a.warps)]
        for impl, config in variants:
            fn, args = step_program(op, rows, a.steps, impl, config)
            us = 1e6 * best_seconds(lambda: fn(*args), a.repeats) / a.steps
            record = {"op": op, "rows": rows, "impl": impl, "width": config and config.width,
                      "num_warps": config and config.num_warps, "us_per_step": us, "device": device,
                      "steps": a.steps}
            records.append(a.out, records.show([record]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
