"""`ccq-compile`: compile a config's sharded train call ahead of time for a TPU topology and report per-chip memory.

    ccq-compile --config pretrain-1.3b --topology v5p:2x2x1          # v5p-8: 4 chips, on this CPU
    ccq-compile --config pretrain-1.3b --only gla-1.3b --topology v6e:2x4 --set mesh.fsdp=-1 --set mesh.data=1
    ccq-compile --config smoke                                          # this machine's own devices

Nothing runs and no data is read: the train call is the one training builds
(`train.step.build_train_call`), its state abstract (shapes and shardings only) and the batch a
stack of `ShapeDtypeStruct`s, so a pod's program compiles on a laptop, the way MaxText's `train_compile.py` checks a config before it takes a
pod. With `--topology`, the devices are those of `jax.experimental.topologies` (needs the
`tpu` extra, libtpu; run with JAX_PLATFORMS=cpu), the program is lowered for the TPU and the
real XLA/Mosaic compiler builds it, so kernel VMEM limits, sharding and HBM all get checked.
Linear-attention models there run the Mosaic TPU kernels compiled, not interpreted
(`impl="pallas"` becomes `"pallas_mosaic_tpu"`, `interpret=False`); the XLA reference impls
stay as configured. Prints one row per run (compile time, per-chip argument / temporary /
output bytes from `memory_analysis`, whether the total fits the chip's HBM) and writes them
as JSON lines with `--out`. Exit status 1 when a run does not compile or does not fit.
"""

import argparse
import dataclasses
import json
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import topologies

from ccq_jax.configlib import parse_overrides
from ccq_jax.models import count_params
from ccq_jax.tokenizers import load_tokenizer
from train.config import fit_vocab
from train.data.config import SYNTHETIC_SOURCES
from train.data.packing import ROW_KEYS
from train.data.synthetic import SyntheticBatches
from train.runs import load_config, select_runs
from train.sharding import batch_sharding, make_mesh, replicated
from train.step import build_train_call

GIB = 2**30
# HBM per chip in GiB (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e), by jax's device_kind
TPU_HBM_GIB = {"TPU v4": 32, "TPU v5 lite": 16, "TPU v5": 95, "TPU v5p": 95, "TPU v6 lite": 32, "TPU v6e": 32}
# XLA's words when a program's temporaries do not fit: "... HLO temporaries (111.88G) exceeds available HBM (95.73G)"
OUT_OF_HBM = re.compile(r"HLO temporaries \(([\d.]+)([KMGT])\) exceeds available HBM")
UNITS = {"K": 2**-20, "M": 2**-10, "G": 1, "T": 2**10}


def topology_devices(name: str) -> list:
    """The devices of a TPU topology such as "v5p:2x2x1" or "v6e:2x4" (libtpu, no TPU needed)."""
    try:
        return list(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
    except Exception as err:  # libtpu missing or a name it does not know: say which
        raise ValueError(f"--topology: cannot make TPU topology {name!r} ({str(err).splitlines()[0]}); install the "
                         f"`tpu` extra (libtpu) and name a chip and its shape, e.g. v5e:2x2, v5p:2x2x1, "
                         f"v6e:2x4") from None


def for_tpu(model_cfg):
    """The model config with its kernel policy compiled for a TPU (`KernelPolicy.for_tpu`: "pallas" and
    "pallas_mosaic_tpu" run the Mosaic TPU kernels with interpret=False; GPU-only kernels are a ValueError; XLA
    references stay; splash attention (sdpa_impl="splash") compiled, not interpreted, whatever kernel.impl)."""
    try:
        return dataclasses.replace(model_cfg, kernel=model_cfg.kernel.for_tpu(splash=model_cfg.sdpa_impl == "splash"))
    except ValueError as err:
        raise ValueError(f"model.{err}") from None


def data_source(data):
    """(the synthetic task's batch maker or None, the vocabulary the data needs), read without touching the data:
    what `train.data.build_pipeline` would give as `synthetic` and `vocab_size`."""
    if data.source in SYNTHETIC_SOURCES:
        synthetic = SyntheticBatches(data)
        return synthetic, synthetic.vocab_size
    return None, load_tokenizer(data.tokenizer, bos_token=data.bos_token, eos_token=data.eos_token).vocab_size


def abstract_batches(data, mesh, steps_per_call: int) -> dict:
    """A call's stack of host batches as `ShapeDtypeStruct`s: int32 [steps_per_call, batch_size, seq_len] per key."""
    shape = (steps_per_call, data.batch_size, data.seq_len)
    return {k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=batch_sharding(mesh, stacked=True)) for k in ROW_KEYS}


def hbm_bytes(device) -> int | None:
    """A device's memory in bytes: a TPU's from `TPU_HBM_GIB`, else what the device reports (None if nothing)."""
    if device.platform == "tpu":
        gib = TPU_HBM_GIB.get(device.device_kind)
        return None if gib is None else gib * GIB
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return (stats or {}).get("bytes_limit")


def failure(err: Exception, hbm_gib: float | None) -> dict:
    """The report's fields for a run that did not compile: XLA's first line and, when the temporaries did not fit
    in HBM, what they needed (how far from fitting the run is)."""
    error = str(err).strip().splitlines()[0][:400]
    fields = {"compiled": False, "error": error, "hbm_gib": hbm_gib}
    needed = OUT_OF_HBM.search(error)
    if needed:
        fields.update(temp_gib=float(needed.group(1)) * UNITS[needed.group(2)], fits=False)
    return fields


def compile_run(cfg, devices, *, tpu: bool) -> dict:
    """Compile `cfg`'s train call (`steps_per_call` steps, state donated) for `devices`; its row of the report."""
    mesh = make_mesh(cfg.mesh, devices)
    synthetic, vocab_size = data_source(cfg.data)
    mcfg = fit_vocab(cfg, vocab_size)
    mcfg = for_tpu(mcfg) if tpu else mcfg
    # checks="eager": the call must be a jitted function to trace and lower (checkify's wrapper is not one)
    _, _, state, _, call = build_train_call(cfg, mesh, mcfg, synthetic.batch if synthetic is not None else None,
                                            abstract=True, checks="eager")
    n = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated(mesh))
    args = (state, n) if synthetic is not None else (state, n, abstract_batches(cfg.data, mesh, cfg.steps_per_call))
    chips = mesh.devices.size
    row = {"name": cfg.name, "model": cfg.model, "params": count_params(mcfg), "device": devices[0].device_kind,
           "chips": chips, "mesh": dict(mesh.shape), "kernel_impl": None if mcfg.family == "transformer" else mcfg.kernel.impl,
           "seq_len": cfg.data.seq_len, "batch_size": cfg.data.batch_size, "grad_accum": cfg.grad_accum,
           "sequences_per_chip": cfg.data.batch_size / cfg.grad_accum / chips, "dtype": mcfg.dtype,
           "param_dtype": mcfg.param_dtype, "remat_policy": mcfg.remat_policy, "scan_layers": mcfg.scan_layers}
    hbm = hbm_bytes(devices[0])
    hbm_gib = None if hbm is None else hbm / GIB
    begin = time.perf_counter()
    try:
        traced = call.trace(*args)
        lowered = traced.lower(lowering_platforms=("tpu",)) if tpu else traced.lower()
        compiled = lowered.compile()
    except Exception as err:  # XLA says why (e.g. RESOURCE_EXHAUSTED in HBM): a row of the report, not a crash
        return {**row, **failure(err, hbm_gib), "compile_s": time.perf_counter() - begin}
    m = compiled.memory_analysis()
    total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    return {**row, "compiled": True, "compile_s": time.perf_counter() - begin,
            "argument_gib": m.argument_size_in_bytes / GIB, "output_gib": m.output_size_in_bytes / GIB,
            "alias_gib": m.alias_size_in_bytes / GIB, "temp_gib": m.temp_size_in_bytes / GIB,
            "generated_code_gib": m.generated_code_size_in_bytes / GIB, "total_gib": total / GIB,
            "hbm_gib": hbm_gib, "fits": None if hbm is None else total <= hbm,
            "kernel_calls": compiled.as_text().count("tpu_custom_call") if tpu else None}


COLUMNS = (("name", "{}", 16), ("chips", "{}", 5), ("mesh", "{}", 12), ("sequences_per_chip", "{:g}", 9),
           ("compile_s", "{:.0f}", 9), ("argument_gib", "{:.2f}", 8), ("temp_gib", "{:.2f}", 8),
           ("total_gib", "{:.2f}", 9), ("hbm_gib", "{:g}", 7), ("fits", "{}", 5))
HEADERS = {"sequences_per_chip": "seq/chip", "compile_s": "compile s", "argument_gib": "args GiB",
           "temp_gib": "temp GiB", "total_gib": "total GiB", "hbm_gib": "HBM GiB"}


def table(rows) -> str:
    lines = ["  ".join(f"{HEADERS.get(n, n):>{w}s}" for n, _, w in COLUMNS)]
    for r in rows:
        r = {**r, "mesh": "x".join(str(v) for v in r["mesh"].values())}
        cells = [fmt.format(r[n]) if r.get(n) is not None else "-" for n, fmt, _ in COLUMNS]
        lines.append("  ".join(f"{c:>{w}s}" for c, (_, _, w) in zip(cells, COLUMNS)))
        if not r["compiled"]:
            lines.append(f"  {r['name']}: did not compile: {r['error']}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ccq-compile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="smoke", help="a named run (train/runs.py) or a YAML file, as for ccq-train")
    p.add_argument("--topology", default=None, help="a TPU topology, e.g. v5e:2x2, v5p:2x2x1 (v5p-8), v6e:2x4 "
                                                    "(v6e-8); default: this machine's devices")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. mesh.fsdp=-1 or data.batch_size=64 (repeatable)")
    p.add_argument("--only", default=None, metavar="NAME,NAME", help="compile only these runs of the config")
    p.add_argument("--out", type=pathlib.Path, default=None, help="append the rows to this JSON-lines file")
    a = p.parse_args(argv)
    try:
        runs = select_runs(load_config(a.config, parse_overrides(a.overrides)), a.only)
        devices = topology_devices(a.topology) if a.topology else None
    except ValueError as err:
        p.error(str(err))
    devices = devices or jax.devices()
    print(f"compiling {len(runs)} run(s) of {a.config} for {len(devices)} x {devices[0].device_kind}"
          f"{f' ({a.topology})' if a.topology else ''}", flush=True)
    rows = []
    for run in runs:
        rows.append(compile_run(run, devices, tpu=a.topology is not None))
        print(f"{run.name}: {'compiled' if rows[-1]['compiled'] else 'failed'} in {rows[-1]['compile_s']:.0f} s",
              flush=True)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            with a.out.open("a") as f:
                f.write(json.dumps({"topology": a.topology, **rows[-1]}) + "\n")
    print()
    print(table(rows))
    return 0 if all(r["compiled"] and r.get("fits") is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
