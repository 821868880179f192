"""Step time of one MQAR sweep cell (`study.mqar_sweep`): the rates trained side by side, per family and impl.

    PYTHONPATH=. python benchmarks/probes/mqar_cell_step.py gdn:pallas:128:4 gdn:chunk:128:4 --out results/mqar/step_time.json

Each case is family:impl:width:members (members: how many of the sweep's rates train side by side, 1-4) on the
cell `--cell`. Per case: the first call of `--steps` steps (compilation included), then the same call again,
synchronised, as ms per step. It decides which `--impl` the sweep runs with: the kernels are tuned for the
language-model shapes, and at MQAR's (2 heads of 64, T = 256, 4 members under `jax.vmap`) XLA's chunk form can
be the faster one.
"""

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp

from study.mqar_sweep import CELLS, FAMILIES, LEARNING_RATES, member_train_calls, run_config


def time_case(family: str, impl: str, width: int, members: int, cell: str, steps: int) -> dict:
    cfg = run_config(family, width, CELLS[cell], 2000, impl, 0)
    begin = time.perf_counter()
    _, _, state, _, run = member_train_calls(cfg, LEARNING_RATES[:members], steps)
    state, metrics = run(state, jnp.int32(steps))
    jax.block_until_ready(metrics)
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    state, metrics = run(state, jnp.int32(steps))
    jax.block_until_ready(metrics)
    return {"family": family, "impl": impl, "width": width, "members": members, "cell": cell,
            "first_call_s": first, "ms_per_step": 1000 * (time.perf_counter() - begin) / steps,
            "device": jax.devices()[0].device_kind}


def _case(text: str) -> tuple:
    family, impl, width, members = text.split(":")
    if family not in FAMILIES or not 1 <= int(members) <= len(LEARNING_RATES):
        raise argparse.ArgumentTypeError(f"expected family:impl:width:members with a family of {FAMILIES} and "
                                         f"1-{len(LEARNING_RATES)} members, got {text!r}")
    return family, impl, int(width), int(members)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="+", type=_case)
    p.add_argument("--cell", choices=tuple(CELLS), default="T256-kv16")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--out", type=pathlib.Path)
    a = p.parse_args(argv)
    rows = []
    for case in a.cases:
        rows.append(time_case(*case, a.cell, a.steps))
        r = rows[-1]
        print(f"{r['family']:>12s} {r['impl']:7s} w{r['width']} x{r['members']}: first call {r['first_call_s']:6.1f} s,"
              f" then {r['ms_per_step']:7.2f} ms/step", flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
