"""Shared memory, registers and spills of every Pallas kernel for an H100/H200 (sm_90), without a GPU.

Lowers the ops' forward and backward at the benchmark's head sizes to Triton IR as the GPU
backend would (as tests/pallas/test_lowering.py does), then compiles each kernel's IR with the
`triton` package and its `ptxas -v`. triton is not a dependency: install the GPU machine's
version where you run this (`pip install --target /tmp/tritonsite triton==3.6.0`, then
`PYTHONPATH=.:/tmp/tritonsite`). XLA compiles the same IR with its own Triton, so the numbers
are indicative; a kernel asking for more than an H200 block's 227 KB of shared memory fails to
launch there.

    PYTHONPATH=.:/tmp/tritonsite python benchmarks/kernel_resources.py --ops gated_delta_rule --dtype bfloat16
    PYTHONPATH=.:/tmp/tritonsite python benchmarks/kernel_resources.py --ops lm_head --tokens 2   # the LM head kernel
    PYTHONPATH=.:/tmp/tritonsite python benchmarks/kernel_resources.py --ops generalized_delta_rule --heads 16,128,128

Checked against the H200: a `delta_dstates` variant that the GPU refused for asking 271,364 bytes
of shared memory comes out here at 271,364; another (k's decay on the `[C, BV]` side, eighth
session) comes out at 205,824 but asked the H200 for 246,788 (238,596 at the GPU tests' T = 1000):
the estimate can be a fifth low, so a kernel this close to the limit may still be refused there.
In CI, tests/pallas/test_lowering.py counts the kernels `benchmarks.tools.lowering` captures (Triton and Mosaic
GPU) and tests/benchmarks/test_kernel_resources.py runs the bf16 check (the fp32 kernels' IEEE dots take this compiler
many minutes).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

from benchmarks.tools.lowering import lowered_kernels

SHARED_LIMIT = 232448  # bytes per block on an H100/H200 (the limit XLA reports when a kernel exceeds it)

COMPILE = """
import os, subprocess, sys
from triton.backends.compiler import GPUTarget
from triton.compiler import compile as triton_compile
import triton.backends.nvidia as nvidia
path, warps, stages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kernel = triton_compile(path, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
open(path + ".ptx", "w").write(kernel.asm["ptx"])
ptxas = os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas")
out = subprocess.run([ptxas, "-arch=sm_90a", "-v", path + ".ptx", "-o", os.devnull], capture_output=True, text=True)
print("shared", kernel.metadata.shared)
print(out.stdout + out.stderr)
"""


def measure(op, dtype, timeout, tokens=128, heads=(2, 256, 512)):
    """[(kernel, warps, stages, (shared bytes, registers, spill stores, spill loads) or None)], one per distinct
    kernel of `op`'s forward and backward at `tokens` tokens (1: the one-token kernels of a decode step) and head
    widths `heads` (H, K, V)."""
    rows, seen = [], set()
    for name, text, warps, stages in lowered_kernels(op, dtype, tokens=tokens, heads=heads)[0]:
        if (name, text) not in seen:
            seen.add((name, text))
            rows.append((name, warps, stages, resources(text, warps, stages, timeout)))
    return rows


def resources(text, warps, stages, timeout):
    """(shared bytes, registers, spill stores, spill loads) of one kernel; None where the compile failed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.ttir")
        with open(path, "w") as f:
            f.write(text)
        try:
            out = subprocess.run([sys.executable, "-c", COMPILE, path, str(warps), str(stages)], capture_output=True,
                                 text=True, timeout=timeout).stdout
        except subprocess.TimeoutExpired:
            return None
    number = lambda pattern: int(m.group(1)) if (m := re.search(pattern, out)) else None
    return (number(r"shared (\d+)"), number(r"Used (\d+) registers"), number(r"(\d+) bytes spill stores"),
            number(r"(\d+) bytes spill loads"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="+", default=["gla", "gated_delta_rule", "ccq_query"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--timeout", type=float, default=600, help="seconds per kernel's compile")
    ap.add_argument("--tokens", type=int, default=128,
                    help="sequence length (1: the one-token decode kernels); for --ops lm_head, the rows (<= 64)")
    ap.add_argument("--heads", default="2,256,512", help="H,K,V of the ops' inputs (fla's KDA-1.3B: 16,128,128)")
    a = ap.parse_args()
    heads = tuple(int(x) for x in a.heads.split(","))
    print("| op | kernel | warps | stages | shared KB | registers | spill stores / loads B |\n|---|---|---|---|---|---|---|")
    for op in a.ops:
        for name, warps, stages, found in measure(op, a.dtype, a.timeout, a.tokens, heads):
            if found is None or found[0] is None:
                print(f"| {op} | {name} | {warps} | {stages} | compile failed or timed out | | |", flush=True)
                continue
            shared, regs, stores, loads = found
            flag = " (over the limit)" if shared > SHARED_LIMIT else ""
            print(f"| {op} | {name} | {warps} | {stages} | {shared / 1024:.1f}{flag} | {regs} | {stores} / {loads} |",
                  flush=True)


if __name__ == "__main__":
    main()
