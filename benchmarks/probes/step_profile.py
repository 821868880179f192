"""Where a train step's device time goes: variants of a case timed alone, and a kernel-level trace of the first.

    PYTHONPATH=. python benchmarks/probes/step_profile.py --case text-100m --set "data.paths=[DIR]" \
        --variant base: --variant bf16-params:model.param_dtype=bfloat16 --trace --out results/loop/profile.json

Each `--variant LABEL:KEY=VALUE,KEY=VALUE` is the case (`benchmarks/train_loop.py`) with those
overrides; its step is timed alone on a batch already on the device (`--steps` steps in a device
loop). With `--trace`, the first variant's steps run under `jax.profiler.trace` and the GPU
kernels of the Perfetto trace are summed by name and by kind (matmul, Pallas/Triton kernel, XLA
fusion, copy/transpose, other): the top kernels and the shares are printed and written. `--keep-trace`
keeps the trace; taken with CUDA graphs off and the HLO dumped, `trace_attribution.py` groups it by the
JAX operation each kernel came from.
"""

import argparse
import json
import pathlib

from ccq_jax.configlib import parse_overrides
from benchmarks.gpu_trace import by_kind, gpu_kernels, kernel_times, trace_call
from benchmarks.train_loop import case_config, device_steps, timed_steps
from train.sharding import make_mesh


def trace(run, state, batch, steps: int, keep: str | None) -> dict:
    """Kernel time per step of `steps` steps of the compiled `run`, by kernel name and by kind."""
    totals, args = kernel_times(gpu_kernels(trace_call(lambda: run(state, batch), keep)))
    per_step = {name: us / steps for name, us in totals.items()}
    top = sorted(per_step.items(), key=lambda x: -x[1])[:40]
    return {"kernel_ms_per_step": sum(per_step.values()) / 1e3,
            "by_kind_ms": {k: v / 1e3 for k, v in by_kind(per_step).items()},
            "top_kernels_ms": {n: us / 1e3 for n, us in top},
            "top_kernel_args": {n: args[n] for n, _ in top}}


def measure(cfg, steps: int, trace_it: bool, keep: str | None) -> dict:
    """Compile time, step time alone (a device loop of `steps` steps on one batch) and optionally the trace."""
    run, state, batch = device_steps(cfg, steps, make_mesh(cfg.mesh))
    state, first_call_s, ms = timed_steps(run, state, batch, steps)
    row = {"first_call_s": first_call_s, "step_ms": ms}
    if trace_it:
        row.update(trace(run, state, batch, steps, keep))
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE,...")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--trace", action="store_true", help="trace the first variant's kernels")
    p.add_argument("--keep-trace", default=None, metavar="PATH", help="copy the Perfetto trace (json.gz) there")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    base = parse_overrides(a.overrides)
    results = []
    for spec in a.variant or ["base:"]:
        label, _, changes = spec.partition(":")
        overrides = {**base, **parse_overrides([c for c in changes.split(",") if c])}
        cfg = case_config(a.case, overrides)
        row = {"variant": label, "overrides": overrides,
               **measure(cfg, a.steps, a.trace and not results, a.keep_trace)}
        results.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'variant':>24s}  step ms  first call s")
    for row in results:
        print(f"{row['variant']:>24s}  {row['step_ms']:7.2f}  {row['first_call_s']:12.1f}")
    if "by_kind_ms" in results[0]:
        print("\nfirst variant, kernel time per step by kind (ms):",
              ", ".join(f"{k} {v:.1f}" for k, v in results[0]["by_kind_ms"].items()))
        for name, ms in list(results[0]["top_kernels_ms"].items())[:15]:
            print(f"  {ms:7.2f}  {name[:110]}")
    if a.out:
        pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
