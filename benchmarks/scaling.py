"""Training throughput across the GPUs of one host: tokens/s per device and scaling efficiency per mesh.

    PYTHONPATH=. python benchmarks/scaling.py --out scaling.jsonl                      # the 1.3B presets, B = 4 x 4096
    XLA_FLAGS=--xla_force_host_platform_device_count=4 PYTHONPATH=. python benchmarks/scaling.py \
        --presets gla-tiny --batch 2 --seqlen 64 --steps 2 --warmup 1 --attn-impl chunk          # a CPU smoke run

For each preset, `benchmarks/train_throughput.py`'s step (AdamW, bf16 compute, `--param-dtype` parameters) runs on
one device at `--batch` rows, then on every device of the host for each mesh of `--meshes` at `--batch` rows per
device (`data`: every device on the data axis; `fsdp`: every device on fsdp, parameters and optimizer state split;
`data:2xfsdp:4`: explicit sizes). Efficiency is tokens/s on N devices over N times one device's, in the same
process. Memory is per device: XLA's plan of the compiled step and the allocator's largest peak (cumulative over
the process: the later rows' peaks include the earlier ones'). With `--trace`, two more steps of each multi-device
run are profiled, and the GPU kernels give the communication's share of the step (NCCL kernels' busy time over
all kernels' busy time, per GPU, averaged) and how much of it overlaps compute kernels on the same GPU.
"""

import argparse
import tempfile

import jax

from benchmarks import records
from benchmarks.gpu_trace import gpu_kernels, perfetto_file, trace_events
from benchmarks.train_throughput import measure
from train.sharding import MESH_AXES, MeshConfig

NAMED_MESHES = {"data": MeshConfig(data=-1), "fsdp": MeshConfig(data=1, fsdp=-1)}


def parse_mesh(text: str) -> MeshConfig:
    """"data", "fsdp" or explicit sizes joined by x ("data:2xfsdp:4") -> MeshConfig."""
    if text in NAMED_MESHES:
        return NAMED_MESHES[text]
    sizes = {"data": 1}
    for part in text.split("x"):
        axis, _, size = part.partition(":")
        if axis not in MESH_AXES or not size.isdigit() or int(size) < 1:
            raise ValueError(f"--meshes: expected data, fsdp or AXIS:SIZE parts joined by x (axes {MESH_AXES}), "
                             f"got {text!r}")
        sizes[axis] = int(size)
    return MeshConfig(**sizes)


def _union(intervals) -> list[tuple[float, float]]:
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a, b) -> float:
    """Length of the overlap of two unions of disjoint sorted intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def communication(kernels: list) -> dict:
    """From GPU kernel events ('X' events with pid, ts, dur in us): per GPU (pid), NCCL kernels' busy time over
    all kernels' busy time, and the fraction of that NCCL time during which a compute kernel also ran; averaged
    over the GPUs."""
    shares, overlaps = [], []
    for pid in sorted({e["pid"] for e in kernels}):
        mine = [e for e in kernels if e["pid"] == pid]
        comm = _union((e["ts"], e["ts"] + e["dur"]) for e in mine if "nccl" in e["name"].lower())
        compute = _union((e["ts"], e["ts"] + e["dur"]) for e in mine if "nccl" not in e["name"].lower())
        busy = _length(_union(comm + compute))
        if busy and comm:
            shares.append(_length(comm) / busy)
            overlaps.append(_intersection(comm, compute) / _length(comm))
        elif busy:
            shares.append(0.0)
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    return {"communication_share": mean(shares), "communication_overlapped": mean(overlaps), "gpus_traced": len(shares)}


def rows_for(preset: str, meshes, batch: int, trace: bool, **kwargs) -> list[dict]:
    """One device, then each mesh over every device; efficiency against the one-device row."""
    one = measure(preset, batch, devices=jax.devices()[:1], **kwargs)
    rows = [{**one, "tokens_per_s_per_device": one["tokens_per_s"], "efficiency": 1.0}]
    n = len(jax.devices())
    for name in meshes:
        with tempfile.TemporaryDirectory() as tmp:
            row = measure(preset, batch * n, mesh_config=parse_mesh(name), devices=jax.devices(),
                          trace_to=tmp if trace else None, **kwargs)
            if trace:
                row.update(communication(gpu_kernels(trace_events(perfetto_file(tmp)))))
        rows.append({**row, "mesh_name": name, "tokens_per_s_per_device": row["tokens_per_s"] / n,
                     "efficiency": row["tokens_per_s"] / (n * one["tokens_per_s"])})
    return rows


def table(rows) -> str:
    lines = ["| preset | mesh | devices | tokens/s | per device | efficiency | planned GiB/device | comm share | "
             "overlapped |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f} %"
    for r in rows:
        lines.append(f"| {r['preset']} | {r.get('mesh_name', 'one device')} | {r['devices']} | "
                     f"{r['tokens_per_s']:,.0f} | {r['tokens_per_s_per_device']:,.0f} | {r['efficiency']:.2f} | "
                     f"{r['planned_GiB']:.1f} | {pct(r.get('communication_share'))} | "
                     f"{pct(r.get('communication_overlapped'))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="gla-1.3b,ccq-gla-1.3b,gdn-1.3b,ccq-gdn-1.3b")
    p.add_argument("--meshes", default="data,fsdp", help="comma-separated: data, fsdp, or e.g. data:2xfsdp:4")
    p.add_argument("--batch", type=int, default=4, help="rows per device")
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--attn-impl", default="pallas")
    p.add_argument("--param-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--trace", action="store_true", help="profile each multi-device run for its communication")
    p.add_argument("--out", help="JSON lines, appended")
    a = p.parse_args(argv)
    meshes = a.meshes.split(",")
    for name in meshes:
        parse_mesh(name)  # refuse a bad spelling before anything compiles
    rows = []
    for preset in a.presets.split(","):
        rows += records.show(rows_for(preset, meshes, a.batch, a.trace, seqlen=a.seqlen, steps=a.steps,
                                      warmup=a.warmup, peak_tflops=a.peak_tflops, attn_impl=a.attn_impl,
                                      param_dtype=a.param_dtype))
    records.append(a.out, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
