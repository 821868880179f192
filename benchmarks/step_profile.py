"""Where a train step's device time goes: variants of a case timed alone, and a kernel-level trace of the first.

    PYTHONPATH=. python benchmarks/step_profile.py --case text-100m --set "data.paths=[DIR]" \
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
import collections
import gzip
import json
import pathlib
import re
import shutil
import tempfile

import jax

from ccq_jax.configlib import parse_overrides
from benchmarks.train_loop import case_config, device_steps, timed_steps
from train.sharding import make_mesh

KINDS = (("matmul", r"gemm|cutlass|nvjet|cublas|xmma|sm90_"), ("copy", r"copy|transpose|memcpy|memset"),
         ("fusion", r"fusion|loop_|input_|reduce"))


def kind(name: str) -> str:
    for label, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "pallas/other"


def gpu_kernels(events: list) -> list:
    """The complete ('X') events on the GPU's stream tracks, or on any GPU track if none is named a stream."""
    tracks = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    processes = {e.get("pid"): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    where = {key: f"{processes.get(key[0], '')} {name}" for key, name in tracks.items()}
    complete = [e for e in events if e.get("ph") == "X"]
    for wanted in (lambda w: "GPU" in w and "Stream" in w, lambda w: "GPU" in w):
        kernels = [e for e in complete if wanted(where.get((e.get("pid"), e.get("tid")), ""))]
        if kernels:
            return kernels
    print("no GPU tracks; processes:", sorted(set(processes.values()))[:10], "tracks:", sorted(set(tracks.values()))[:20])
    return []


def trace_events(path) -> list:
    """The events of a Perfetto JSON trace, gzipped (`.gz`) or not."""
    data = pathlib.Path(path).read_bytes()
    events = json.loads(gzip.decompress(data) if str(path).endswith(".gz") else data)
    return events["traceEvents"] if isinstance(events, dict) else events


def perfetto_file(folder) -> pathlib.Path:
    """The Perfetto trace `jax.profiler.trace(folder, create_perfetto_trace=True)` wrote under `folder`."""
    return next(pathlib.Path(folder).rglob("perfetto_trace.json.gz"))


def kernel_times(path: pathlib.Path) -> tuple[dict[str, float], dict[str, dict]]:
    """(microseconds per kernel name, the first event's args per name) over the GPU tracks of a Perfetto JSON."""
    events = trace_events(path)
    totals, args = collections.Counter(), {}
    for e in gpu_kernels(events):
        totals[e["name"]] += float(e.get("dur", 0.0))
        args.setdefault(e["name"], e.get("args", {}))
    return dict(totals), args


def trace(run, state, batch, steps: int, keep: str | None) -> dict:
    """Kernel time per step of `steps` steps of the compiled `run`, by kernel name and by kind."""
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(run(state, batch))
        path = perfetto_file(tmp)
        totals, args = kernel_times(path)
        if keep:
            pathlib.Path(keep).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, keep)
    per_step = {name: us / steps for name, us in totals.items()}
    by_kind = collections.Counter()
    for name, us in per_step.items():
        by_kind[kind(name)] += us
    top = sorted(per_step.items(), key=lambda x: -x[1])[:40]
    return {"kernel_ms_per_step": sum(per_step.values()) / 1e3,
            "by_kind_ms": {k: v / 1e3 for k, v in by_kind.most_common()},
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
