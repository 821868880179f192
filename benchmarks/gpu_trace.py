"""Reading a Perfetto trace of `jax.profiler.trace(..., create_perfetto_trace=True)`: its GPU kernel events, their
kind (matmul, copy/transpose, XLA fusion, Pallas/other) and their time summed by kernel name.

Shared by the benchmarks that trace (`scaling.py`, `inference.py`) and by the probes `probes/step_profile.py` and
`probes/trace_attribution.py`.
"""

import collections
import gzip
import json
import pathlib
import re
import shutil
import tempfile

import jax

KINDS = (("matmul", r"gemm|cutlass|nvjet|cublas|xmma|sm90_"), ("copy", r"copy|transpose|memcpy|memset"),
         ("fusion", r"fusion|loop_|input_|reduce"))


def kind(name: str) -> str:
    """The first of KINDS whose pattern the kernel name matches; "pallas/other" if none does."""
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
    print("no GPU tracks; processes:", sorted(set(processes.values()))[:10], "tracks:",
          sorted(set(tracks.values()))[:20])
    return []


def trace_events(path) -> list:
    """The events of a Perfetto JSON trace, gzipped (`.gz`) or not."""
    data = pathlib.Path(path).read_bytes()
    events = json.loads(gzip.decompress(data) if str(path).endswith(".gz") else data)
    return events["traceEvents"] if isinstance(events, dict) else events


def perfetto_file(folder) -> pathlib.Path:
    """The Perfetto trace `jax.profiler.trace(folder, create_perfetto_trace=True)` wrote under `folder`."""
    return next(pathlib.Path(folder).rglob("perfetto_trace.json.gz"))


def trace_call(run, keep: str | None = None) -> list:
    """The events of a Perfetto trace of one call of `run` (waited for); `keep`: also copy the trace file there."""
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(run())
        path = perfetto_file(tmp)
        if keep:
            pathlib.Path(keep).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, keep)
        return trace_events(path)


def kernel_times(kernels: list) -> tuple[dict[str, float], dict[str, dict]]:
    """(microseconds per kernel name, the first event's args per name) of kernel events (`gpu_kernels`)."""
    totals, args = collections.Counter(), {}
    for e in kernels:
        totals[e["name"]] += float(e.get("dur", 0.0))
        args.setdefault(e["name"], e.get("args", {}))
    return dict(totals), args


def by_kind(times: dict[str, float]) -> dict[str, float]:
    """{kernel name: time} summed by `kind`, largest first."""
    totals = collections.Counter()
    for name, t in times.items():
        totals[kind(name)] += t
    return dict(totals.most_common())
