"""Roofline of each op's forward+backward on TPUs, from ahead-of-time compilation on a CPU (no TPU needed).

    JAX_PLATFORMS=cpu python benchmarks/probes/tpu_roofline.py --out results/bench/tpu_roofline.json

Needs the `tpu` extra (libtpu). Each op at the 1.3B shapes (B=4, T=4096, bf16; GLA H=4, Gated
DeltaNet H=6; K=256, V=512), `impl="pallas_mosaic_tpu"` and XLA's `"chunk"`, is compiled for one
topology (`--topology`, default v5p); XLA's cost analysis gives its FLOPs and HBM bytes (for the
kernels, their `pl.CostEstimate`: `pallas_kernels/tpu.py`), its memory analysis the temporaries.
The roofline time on each chip is max(FLOPs / peak bf16 FLOP/s, bytes / HBM bandwidth) with
Google's published per-chip peaks (`CHIPS`). FLOPs count each product once: fp32 products at
HIGHEST precision take six bf16 passes on the MXU, which this bound does not include.
"""

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp

import ccq_jax.ops as ops

# peak dense bf16 TFLOP/s and HBM GB/s per chip: cloud.google.com/tpu/docs/v5e, /v5p, /v6e (Trillium)
CHIPS = {"v5e": (197.0, 819.0), "v5p": (459.0, 2765.0), "v6e": (918.0, 1640.0)}
TOPOLOGIES = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
SHAPES = {"gla": (4, 4096, 4, 256, 512), "gated_delta_rule": (4, 4096, 6, 256, 512)}
OPS = ("gla", "ccq_gla", "gated_delta_rule", "ccq_gated_delta_rule")


def inputs(name, sharding):
    b, t, h, dk, dv = SHAPES["gla" if name.endswith("gla") else "gated_delta_rule"]
    S = lambda dtype, *shape: jax.ShapeDtypeStruct((b, t, h, *shape), dtype, sharding=sharding)
    q, k, v, lam = S(jnp.bfloat16, dk), S(jnp.bfloat16, dk), S(jnp.bfloat16, dv), S(jnp.float32)
    backbone = (q, k, v, S(jnp.float32, dk)) if name.endswith("gla") else (q, k, v, S(jnp.float32), S(jnp.float32))
    return (*backbone, lam) if name.startswith("ccq") else backbone


def analyse(name, impl, device, chunk):
    args = inputs(name, jax.sharding.SingleDeviceSharding(device))
    options = dict(interpret=False) if impl.startswith("pallas") else {}
    loss = lambda *x: jnp.sum(getattr(ops, name)(*x, impl=impl, chunk_size=chunk, **options)[0].astype(jnp.float32))
    begin = time.perf_counter()
    compiled = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(args))))).trace(*args).lower(
        lowering_platforms=("tpu",)).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    row = {"op": name, "impl": impl, "chunk": chunk, "compile_s": time.perf_counter() - begin,
           "flops": float(cost.get("flops", 0.0)), "bytes": float(cost.get("bytes accessed", 0.0)),
           "transcendentals": float(cost.get("transcendentals", 0.0)),
           "temp_bytes": compiled.memory_analysis().temp_size_in_bytes}
    for chip, (tflops, gbs) in CHIPS.items():
        compute, memory = row["flops"] / (tflops * 1e12), row["bytes"] / (gbs * 1e9)
        row[f"{chip}_ms"] = 1e3 * max(compute, memory)
        row[f"{chip}_bound"] = "MXU" if compute >= memory else "HBM"
    return row


def table(rows) -> str:
    lines = ["| op | impl | GFLOP | HBM GB | temp GiB | " + " | ".join(f"{c} ms (bound)" for c in CHIPS) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(CHIPS)]
    for r in rows:
        chips = " | ".join(f"{r[f'{c}_ms']:.2f} ({r[f'{c}_bound']})" for c in CHIPS)
        lines.append(f"| {r['op']} | {r['impl']} | {r['flops'] / 1e9:.0f} | {r['bytes'] / 1e9:.2f} | "
                     f"{r['temp_bytes'] / 2**30:.2f} | {chips} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topology", choices=sorted(TOPOLOGIES), default="v5p")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--out", type=pathlib.Path)
    a = p.parse_args(argv)
    from jax.experimental import topologies

    device = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[a.topology]).devices[0]
    rows = []
    for name in a.ops.split(","):
        for impl in ("pallas_mosaic_tpu", "chunk"):
            rows.append(analyse(name, impl, device, a.chunk))
            print(f"{name} {impl}: compiled in {rows[-1]['compile_s']:.0f} s", flush=True)
    print(table(rows))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"topology": TOPOLOGIES[a.topology], "device": device.device_kind,
                                     "jax": jax.__version__, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
