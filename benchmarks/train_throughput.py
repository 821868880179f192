"""Whole-model training throughput: tokens/s, MFU and memory of one AdamW step per preset.

    PYTHONPATH=. python benchmarks/train_throughput.py --presets gla-1.3b ccq-gla-1.3b --batch 4 --seqlen 4096

Each preset is built with bf16 compute on `--param-dtype` parameters (fp32: the usual mixed precision;
bfloat16: what fla's anchor does, `model.to(torch.bfloat16)` under AdamW), under `--remat-policy`
(`ModelConfig.remat_policy`; "dots" keeps only the matmuls' outputs and the kernels' residuals), optionally with
the blocks as one scan (`--scan-layers`), initialised in place on a one-device mesh, and trained with the
project's own train step (`train.step`: AdamW, clipping, the masked LM loss) on a fresh batch of random tokens
per step. After `--warmup` compiled steps, `--steps` steps are timed end to end (device synchronised); a
compilation inside them is counted and warned about (its time is not a step's); the first warm-up step's time
(`first_step_s`: trace, compile, run) and the XLA compilations in the warm-up (`xla_compile_s`) show what
`--scan-layers` saves. Memory: the allocator's peak (`peak_GiB`, which includes what XLA's autotuning allocated
while compiling) and XLA's plan of the compiled step (`planned_GiB`). MFU counts `ccq_jax.models.flops`' FLOPs
per token (the weights' products and the mixers' own work; `mfu_6n`: 6 N as before) against `--peak-tflops`
(dense bf16 of an H100/H200: 989). Results go to stdout as a table and, with --out, as JSON lines; a preset that
fails (e.g. out of memory) gets a row with its error and the others still run. `--memory-only` compiles the step
on the current backend and reports XLA's planned buffers instead (on a CPU these are the CPU compiler's totals,
not a GPU's peak: gla-1.3b with `--attn-impl chunk --param-dtype bfloat16` planned 147.3 GiB of temporaries
there); `--target h200` with it compiles for a deviceless H200 on a CPU (`benchmarks.tools.targets`: the gpu
extra, JAX_PLATFORMS=cpu), the GPU compiler's own plan, nothing built or run (docs/benchmarks.md, "Training memory
planned for a GPU without one"). Each row also counts the compiled step's launches by kind (GEMMs, kernels, XLA's
fusions) and estimates the bytes each kind moves (`launches`, `benchmarks.tools.hlo`): a deviceless compile has no
cost analysis, and this is how two remat policies' recomputation is compared before a GPU times it.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.tools.compilation import CompileCounter
from benchmarks.tools.hlo import entry_launches
from benchmarks.tools.targets import TARGETS, compiled_for, target_device
from ccq_jax.models import count_params, get_config
from ccq_jax.models.flops import mfu, train_flops_per_token
from train.config import TrainConfig
from train.optim import OptimConfig
from train.sharding import MeshConfig, batch_sharding, make_mesh
from train.step import build_train_call, compile_steps, make_eval_step


def measure(preset, batch_size, seqlen, steps, warmup, peak_tflops, attn_impl, param_dtype="float32",
            remat_policy="elementwise", loss_chunk_len=0, memory_only=False, scan_layers=False, mesh_config=None,
            devices=None, trace_to=None, target="local", sdpa_impl=None):
    """One preset's row. batch_size is the global batch; `mesh_config` (default: one data axis) over `devices`
    (default: the first device) splits it; memory is per device (the largest peak, XLA's per-device plan).
    `trace_to`: a folder where two more steps, after the timed ones, are traced (`jax.profiler`, Perfetto).
    `target` (memory_only only): "local", or a deviceless GPU of `benchmarks.tools.targets` that the step is
    compiled for, its kernels lowered for it and nothing built. `sdpa_impl`: the softmax attention's backend (the
    Transformer's and a hybrid's attention layers; None: the preset's)."""
    if target != "local" and not memory_only:
        raise ValueError(f"target: a deviceless {target!r} compiles without running; expected memory_only=True")
    device = target_device(target)
    overrides = dict(dtype="bfloat16", param_dtype=param_dtype, remat_policy=remat_policy,
                     scan_layers=scan_layers)
    if attn_impl and not preset.startswith("transformer"):
        overrides["kernel.impl"] = attn_impl
    if sdpa_impl:
        overrides["sdpa_impl"] = sdpa_impl
    cfg = compiled_for(get_config(preset, **overrides), device)
    mesh = make_mesh(mesh_config or MeshConfig(), [device] if device is not None else
                     devices if devices is not None else jax.devices()[:1])
    run = TrainConfig(name=preset, model=preset, model_overrides=overrides, seed=0, steps=steps + warmup,
                      optim=OptimConfig(lr=1e-4, warmup_steps=0), loss_chunk_len=loss_chunk_len)
    # cfg: the preset's vocabulary kept; abstract for a deviceless target (nothing to build the state on)
    graphdef, others, state, step, _ = build_train_call(run, mesh, cfg, abstract=device is not None)
    train_step, _ = compile_steps(step, make_eval_step(graphdef, others, loss_chunk_len), state, mesh)
    rng = np.random.default_rng(0)

    def host_batch():  # fresh for every step: a repeated batch is memorised within a few steps
        ids = rng.integers(0, cfg.vocab_size, (batch_size, seqlen + 1), dtype=np.int32)
        return {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "segment_ids": np.ones((batch_size, seqlen), np.int32),
                "loss_mask": np.ones((batch_size, seqlen), np.int32)}

    def batch():
        if device is not None:  # a deviceless target: the batch's shapes and shardings only
            return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding(mesh))
                    for k, v in host_batch().items()}
        return jax.device_put({k: jnp.asarray(v) for k, v in host_batch().items()}, batch_sharding(mesh))

    settings = {"attn_impl": attn_impl or "default", "sdpa_impl": cfg.sdpa_impl, "param_dtype": param_dtype,
                "remat_policy": remat_policy, "loss_chunk_len": loss_chunk_len, "scan_layers": scan_layers,
                "devices": mesh.size,
                "mesh": {k: v for k, v in mesh.shape.items() if v > 1}, "batch": batch_size}
    if memory_only:
        with CompileCounter() as compiles:
            begin = time.perf_counter()
            planned = planned_memory(train_step, state, batch())
        return {"preset": preset, "params_M": count_params(cfg) / 1e6, **planned,
                "first_compile_s": time.perf_counter() - begin, "xla_compile_s": sum(compiles.seconds),
                "backend": jax.default_backend() if device is None else device.platform,
                "target": target, "device_kind": mesh.devices.flat[0].device_kind, **settings}
    batches = [batch() for _ in range(warmup + steps)]
    begin = time.perf_counter()
    ends = []  # seconds from the start to the end of each warm-up step: the first one traces and compiles
    with CompileCounter() as warmup_compiles:
        for i, data in enumerate(batches[:warmup]):
            state, metrics = train_step(state, data)
            jax.block_until_ready(metrics)
            ends.append(time.perf_counter() - begin)
            print(f"{preset}: warm-up step {i + 1} done after {ends[-1]:.1f} s", flush=True)
    with CompileCounter() as compiles:
        start = time.perf_counter()
        for data in batches[warmup:]:
            state, metrics = train_step(state, data)
        jax.block_until_ready(metrics)
        seconds = (time.perf_counter() - start) / steps
    if compiles.seconds:
        print(f"{preset}: WARNING: {len(compiles.seconds)} compilation(s), {sum(compiles.seconds):.1f} s, inside the "
              "timed steps: the time is not a step's; raise --warmup", flush=True)
    if trace_to:
        with jax.profiler.trace(trace_to, create_perfetto_trace=True):
            for data in batches[-2:]:
                state, metrics = train_step(state, data)
            jax.block_until_ready(metrics)
    n = count_params(cfg)
    tokens_per_s = batch_size * seqlen / seconds
    peak = max((d.memory_stats() or {}).get("peak_bytes_in_use", 0) for d in mesh.devices.flat)
    return {"preset": preset, "params_M": n / 1e6, "step_ms": 1e3 * seconds, "tokens_per_s": tokens_per_s,
            **{"mfu": None, **mfu(train_flops_per_token(cfg, seqlen), n, tokens_per_s, peak_tflops * 1e12)},
            "peak_GiB": peak / 2**30, **planned_memory(train_step, state, batches[-1]),
            "loss": float(metrics["loss"]), "compiles_in_timed_steps": len(compiles.seconds),
            "first_step_s": ends[0] if ends else None, "xla_compile_s": sum(warmup_compiles.seconds), **settings}


def planned_memory(train_step, state, batch):
    """XLA's buffer plan of the compiled step, in GiB: its arguments, temporaries, and the step's total (arguments,
    outputs not aliased to a donated argument, temporaries); and its launches by kind with their estimated traffic
    (`benchmarks.tools.hlo.entry_launches`). After a call this is the cached executable (no compilation); unlike
    the allocator's peak, it leaves out what compiling itself allocated (autotuning)."""
    compiled = train_step.lower(state, batch).compile()
    mem = compiled.memory_analysis()
    total = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
    gib = lambda n: n / 2**30
    return {"arguments_GiB": gib(mem.argument_size_in_bytes), "temporaries_GiB": gib(mem.temp_size_in_bytes),
            "planned_GiB": gib(total), "launches": entry_launches(compiled.as_text())}


def launches_text(launches) -> str:
    """"kind launches: GiB, ..." of `entry_launches`' summary."""
    return ", ".join(f"{kind} {v['launches']}: {v['GiB']:.1f}" for kind, v in launches.items())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["gla-1.3b", "ccq-gla-1.3b", "gdn-1.3b", "ccq-gdn-1.3b"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--attn-impl", default=None, help="ops impl for the linear models (default: the preset's)")
    p.add_argument("--sdpa-impl", default=None, choices=["xla", "cudnn", "splash"],
                   help="softmax attention's backend, the Transformer's and a hybrid's (default: the preset's, "
                        "None: XLA's)")
    p.add_argument("--param-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--remat-policy", default="elementwise", choices=["none", "elementwise", "dots", "block"],
                   help="what the backward pass recomputes (ModelConfig.remat_policy)")
    p.add_argument("--scan-layers", action="store_true", help="the blocks as one lax.scan (ModelConfig.scan_layers)")
    p.add_argument("--loss-chunk-len", type=int, default=0, help="LM head + loss this many positions at a time")
    p.add_argument("--memory-only", action="store_true",
                   help="compile the step and report XLA's buffer sizes (arguments, temporaries) without running it")
    p.add_argument("--target", default="local", choices=["local", *sorted(TARGETS)],
                   help="with --memory-only: compile for this GPU without one (deviceless; the gpu extra and "
                        "JAX_PLATFORMS=cpu); default: this machine's backend")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.target != "local" and not a.memory_only:
        p.error(f"--target {a.target}: a deviceless target compiles without running; expected --memory-only")
    rows = []
    for preset in a.presets:
        try:
            row = measure(preset, a.batch, a.seqlen, a.steps, a.warmup, a.peak_tflops, a.attn_impl, a.param_dtype,
                          a.remat_policy, a.loss_chunk_len, a.memory_only, a.scan_layers, target=a.target,
                          sdpa_impl=a.sdpa_impl)
        except Exception as err:  # report it and go on with the other presets
            row = {"preset": preset, "error": f"{type(err).__name__}: {str(err)[:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    if a.memory_only:
        print(f"\n{'preset':16s} {'loss chunk':>10s} {'arguments GiB':>14s} {'temporaries GiB':>16s} "
              f"{'compile s':>10s}  launches: traffic GiB")
        for r in rows:
            print(f"{r['preset']:16s} failed: {r['error'][:100]}" if "error" in r else
                  f"{r['preset']:16s} {r['loss_chunk_len']:10d} {r['arguments_GiB']:14.2f} "
                  f"{r['temporaries_GiB']:16.2f} {r['first_compile_s']:10.1f}  {launches_text(r['launches'])}")
        return
    print(f"\n{'preset':16s} {'params':>8s} {'step ms':>9s} {'tokens/s':>10s} {'MFU':>6s} {'peak GiB':>9s} "
          f"{'planned GiB':>12s} {'1st step s':>11s}")
    for r in rows:
        if "error" in r:
            print(f"{r['preset']:16s} failed: {r['error'][:100]}")
            continue
        mfu_text = f"{r['mfu']:.0%}" if r["mfu"] is not None else "-"
        print(f"{r['preset']:16s} {r['params_M']:7.1f}M {r['step_ms']:9.1f} {r['tokens_per_s']:10,.0f} {mfu_text:>6s} "
              f"{r['peak_GiB']:9.1f} {r['planned_GiB']:12.1f} {r['first_step_s'] or 0:11.1f}")


if __name__ == "__main__":
    main()
