"""Where a traced step's GPU time goes, by the JAX operation each kernel came from.

    python benchmarks/probes/trace_attribution.py TRACE.json.gz HLO_AFTER_OPTIMIZATIONS.txt[.gz] --steps 5

The trace is `step_profile.py --trace --keep-trace PATH`'s Perfetto file, taken with CUDA graphs
off and the optimized HLO dumped, so each kernel event names the HLO instruction it runs:

    XLA_FLAGS="--xla_gpu_enable_command_buffer= --xla_dump_to=DIR --xla_dump_hlo_module_re=jit__lambda" \
        python benchmarks/probes/step_profile.py ... --trace --keep-trace trace.json.gz

Each instruction's `op_name` metadata (the JAX name stack: `jvp(...)` forward, `transpose(jvp(...))`
backward, `checkpoint` recomputed, `jit(gla)/chunk_dqk` a Pallas kernel) is the group key, with
the outer `jit(<lambda>)/while/body/...` scaffolding removed; kernels are also split into GEMMs
(cuBLAS), Pallas kernels and XLA fusions. Prints ms per step and writes `--out` JSON.
"""

import argparse
import collections
import gzip
import json
import pathlib
import re

from benchmarks.gpu_trace import gpu_kernels, trace_events

_SCAFFOLD = re.compile(r"^jit\(<lambda>\)/(while/body/eval_jaxpr/)*")


def _read(path: str) -> str:
    data = pathlib.Path(path).read_bytes()
    return (gzip.decompress(data) if path.endswith(".gz") else data).decode()


def op_names(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> its op_name metadata, from an optimized HLO module's text."""
    names = {}
    for m in re.finditer(r'^\s*(?:ROOT )?%?([\w.\-]+) = [^\n]*?op_name="([^"]*)"', hlo_text, re.MULTILINE):
        names[m.group(1)] = m.group(2)
    return names


def family(kernel: str, instruction: str) -> str:
    if "pallas_call" in instruction:
        return "pallas"
    if re.search(r"nvjet|gemm|cublas|cutlass|xmma", kernel + " " + instruction, re.IGNORECASE):
        return "gemm"
    return "fusion/other"


def attribute(trace_path: str, hlo_path: str, steps: int) -> dict:
    events = trace_events(trace_path)
    names = op_names(_read(hlo_path))
    groups, calls, kinds = collections.Counter(), collections.Counter(), collections.Counter()
    unnamed = 0
    for e in gpu_kernels(events):
        instruction = e.get("args", {}).get("hlo_op", "")
        op = names.get(instruction)
        unnamed += op is None
        kind = family(e["name"], instruction)
        key = (kind, _SCAFFOLD.sub("", op) if op is not None else f"(no op_name) {e['name']}")
        ms = float(e.get("dur", 0.0)) / 1e3 / steps
        groups[key] += ms
        calls[key] += 1
        kinds[kind] += ms
    rows = [{"kind": k, "op_name": op, "ms_per_step": ms, "kernels_per_step": calls[(k, op)] / steps}
            for (k, op), ms in groups.most_common()]
    return {"total_ms_per_step": sum(kinds.values()), "by_kind_ms": dict(kinds.most_common()),
            "events_without_op_name": unnamed, "groups": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("hlo")
    p.add_argument("--steps", type=int, required=True, help="train steps the trace holds")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    result = attribute(a.trace, a.hlo, a.steps)
    print(f"{result['total_ms_per_step']:.1f} ms of kernels per step: "
          + ", ".join(f"{k} {v:.1f}" for k, v in result["by_kind_ms"].items()))
    for row in result["groups"][:a.top]:
        print(f"{row['ms_per_step']:7.2f} ms  {row['kernels_per_step']:5.0f}x  {row['kind']:12s}  {row['op_name'][-100:]}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
