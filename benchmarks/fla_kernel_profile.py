"""Per-kernel CUDA time of fla's chunked ops (fwd+bwd), to set beside our kernels timed alone.

Run on the GPU machine with fla's wheels installed (docs/benchmarks.md says how):
    python3 benchmarks/fla_kernel_profile.py                 # GLA and Gated DeltaNet, B = 4, T = 4096

Same inputs and shapes as benchmarks/kernels.py; `torch.profiler` over `--calls` fwd+bwd calls
after a warm-up; prints each kernel's CUDA time per call and how often it runs per call.
fla refuses its Gated DeltaNet backward on Hopper (fla issue #640); `kernels.fla_call` lifts the
guard to time it.
"""

import argparse

from benchmarks.kernels import SHAPES, _inputs, fla_call


def profile(family, B, T, calls):
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fn, do = fla_call(family, _inputs(family, B, T))
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--families", nargs="+", default=["gla", "gdn"], choices=sorted(SHAPES))
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    for family in a.families:
        rows = profile(family, a.batch, a.seqlen, a.calls)
        print(f"\nfla {family} fwd+bwd, B={a.batch} T={a.seqlen}: {sum(r[0] for r in rows):.3f} ms of kernels per call")
        print("| ms per call | runs per call | kernel |\n|---|---|---|")
        for ms, count, name in rows:
            print(f"| {ms:.3f} | {count} | `{name[:80]}` |")


if __name__ == "__main__":
    main()
