"""Per-kernel CUDA time of fla's chunked ops (fwd+bwd), to set beside our kernels timed alone.

Run on the GPU machine with fla's wheels installed (docs/benchmarks.md says how):
    python3 benchmarks/fla_kernel_profile.py                 # GLA and Gated DeltaNet, B = 4, T = 4096

Same inputs and shapes as benchmarks/kernels.py; `torch.profiler` over `--calls` fwd+bwd calls
after a warm-up; prints each kernel's CUDA time per call and how often it runs per call.
fla refuses its Gated DeltaNet backward on Hopper (fla issue #640); the guard is lifted here, as
in kernels.py, to time it.
"""

import argparse

from benchmarks.kernels import SHAPES, _inputs


def profile(family, B, T, calls):
    import torch
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gla import chunk_gla
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    chunk_o.IS_NVIDIA_HOPPER = False  # timing only: its GDN gradients are wrong on Hopper
    x = _inputs(family, B, T)
    t = lambda a, dt=torch.bfloat16: torch.tensor(a, device="cuda").to(dt).requires_grad_()
    q, k, v, g = t(x["q"]), t(x["k"]), t(x["v"]), t(x["g"], torch.float32)
    do = torch.tensor(x["do"], device="cuda").to(torch.bfloat16)
    if family == "gla":
        fn = lambda: chunk_gla(q, k, v, g)[0]
    else:
        beta = t(x["beta"])
        fn = lambda: chunk_gated_delta_rule(q, k, v, g, beta)[0]
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
