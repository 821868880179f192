"""Per-kernel GPU time of one fwd+bwd call, fla's chunked ops or ours (impl="pallas"), kernel by kernel.

Run on the GPU machine (fla's wheels installed for `--who fla`; docs/benchmarks.md says how):
    python3 -m benchmarks.kernel_profile --who fla                 # fla's GLA and Gated DeltaNet
    python3 -m benchmarks.kernel_profile --who ours                # ours, CCQ included (--ops to choose)

Same inputs and shapes as benchmarks/kernels.py (B = 4, T = 4096). fla: `torch.profiler`; ours:
`jax.profiler.trace` of the compiled fwd+bwd program, the GPU's kernel events read back from the
trace (one process each: the two profilers cannot share the GPU's tracing interface). Both over
`--calls` calls after a warm-up; each kernel's time per call and how often it runs per call
(XLA's fusions appear under their own names). fla refuses its gated backward on Hopper with a Triton before
3.7.1 (fla issue #640); there `kernels.fla_call` lifts the guard to time it.
"""

import argparse
import collections
import glob
import gzip
import json
import tempfile

from benchmarks.kernels import OURS, SHAPES, bench_inputs, ours_fn, fla_call, ours_args

FAMILY = {op: family for family, ops in OURS.items() for op in ops}


def profile_fla(family, B, T, calls):
    """[(ms per call, runs per call, kernel)] of fla's chunked op of `family`."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fn, do, _ = fla_call(family, bench_inputs(family, B, T))
    for _ in range(5):
        fn().backward(do)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn().backward(do)
        torch.cuda.synchronize()
    rows = [(e.self_device_time_total / calls / 1e3, e.count // calls, e.key) for e in prof.key_averages()
            if e.self_device_time_total > 0]
    return sorted(rows, reverse=True)


def profile_ours(op, B, T, calls):
    """[(ms per call, runs per call, kernel)] of our op (impl="pallas") by its fwd+bwd program's GPU events."""
    import jax

    args = ours_args(bench_inputs(FAMILY[op], B, T), grad=True)
    fn = ours_fn(op, "pallas", grad=True)
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready([fn(*args) for _ in range(calls)])
        (path,) = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
        events = json.load(gzip.open(path))["traceEvents"]
    gpus = {e["pid"] for e in events if e.get("name") == "process_name" and "GPU" in e["args"]["name"]}
    # a GPU's kernels are on its "Stream #N" lines; its "XLA Ops" and "XLA Modules" lines repeat them
    streams = {(e["pid"], e["tid"]) for e in events if e.get("name") == "thread_name" and e.get("pid") in gpus
               and e["args"]["name"].startswith("Stream")}
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in streams and "dur" in e:
            total[e["name"]] += e["dur"]
            count[e["name"]] += 1
    return sorted(((us / calls / 1e3, count[name] // calls, name) for name, us in total.items()), reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--who", default="ours", choices=["fla", "ours"])
    ap.add_argument("--ops", nargs="+", default=sorted(FAMILY), choices=sorted(FAMILY),
                    help="ours; fla profiles the plain op of each family named")
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    if a.who == "fla":
        runs = [("fla", family, profile_fla) for family in SHAPES if any(FAMILY[op] == family for op in a.ops)]
    else:
        runs = [("ours", op, profile_ours) for op in a.ops]
    for who, what, fn in runs:
        rows = fn(what, a.batch, a.seqlen, a.calls)
        print(f"\n{who} {what} fwd+bwd, B={a.batch} T={a.seqlen}: {sum(r[0] for r in rows):.3f} ms of kernels per call")
        print("| ms per call | runs per call | kernel |\n|---|---|---|")
        for ms, count, name in rows:
            print(f"| {ms:.3f} | {count} | `{name[:80]}` |", flush=True)


if __name__ == "__main__":
    main()
