"""Training-loop throughput: where a small model's step time goes, and the loop's rate end to end.

    PYTHONPATH=. python benchmarks/train_loop.py --case mqar-2.6m --out results/loop/mqar.json
    PYTHONPATH=. python benchmarks/train_loop.py --case text-100m --set model=gdn-100m --set data.paths=[DIR]

A case is a `TrainConfig` (below; `--set` overrides it as `ccq-train` does). Three numbers per run:
- `data_ms`: one batch from the data pipeline alone (the grain iterator on the host, or the
  device generator of synthetic tasks, jitted and synchronised), median of `--probe` batches;
- `step_ms`: one train step alone on a batch already on the device (a device loop of
  `--probe` steps, synchronised), the device's share;
- `loop_steps_per_s`: `train.loop.train` itself, from its metrics: the median over log rows
  (after the first, which holds the compilation) of tokens/s over tokens per step.
MFU (`ccq_jax.models.flops`: the weights' products and the mixers' own work; `mfu_6n`: 6 N as before)
against `--peak-tflops` (dense bf16, H100/H200: 989). The same
script runs against an older checkout (PYTHONPATH=that tree) to give the "before" numbers: it
only uses `train.loop.train` and the pipeline there, and sets `steps_per_call` only where the
config has it.
"""

import argparse
import dataclasses
import json
import pathlib
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

from ccq_jax import configlib
from ccq_jax.configlib import parse_overrides
from ccq_jax.models import count_params
from ccq_jax.models.flops import mfu, train_flops_per_token
from train.config import TrainConfig, apply_overrides, fit_vocab
from train.data import build_pipeline
from train.loop import train
from train.metrics import read_metrics
from train.sharding import host_batch_to_global, make_mesh
from train.step import build_train_call

_LOOP = {"steps": 1000, "log_every": 100, "eval_batches": 0, "checkpoint_every": 0, "keep_checkpoints": 1,
         "optim": {"lr": 1e-3, "warmup_steps": 50}}
CASES = {
    # the run: hidden 128, 2 layers, B = 128, T = 256, vocabulary 8192 (2.6M parameters), Zoology's 32 pairs
    "mqar-2.6m": {"name": "mqar-2.6m", "model": "gla-tiny",
                  "model_overrides": {"hidden_size": 128, "kernel.impl": "pallas", "use_short_conv": True},
                  "data": {"source": "mqar", "seq_len": 256, "batch_size": 128,
                           "mqar": {"vocab_size": 8192, "num_kv_pairs": 32}}, **_LOOP},
    # ~100M parameters on packed text: data.paths must name ArrayRecord shards (ccq-prepare-data) and data.tokenizer
    # their tokenizer.json
    "text-100m": {"name": "text-100m", "model": "gla-100m",
                  "model_overrides": {"kernel.impl": "pallas", "dtype": "bfloat16"},
                  "data": {"source": "array_record", "seq_len": 2048, "batch_size": 32, "paths": ["."]},
                  **{**_LOOP, "steps": 300, "log_every": 25}},
}


def case_config(case: str, overrides: dict) -> TrainConfig:
    """The case with `overrides`; `model` replaces the preset before the case is validated (so an older checkout
    that lacks the case's preset can run it as another preset with overrides)."""
    overrides = dict(overrides)
    fields = {**CASES[case], **({"model": overrides.pop("model")} if "model" in overrides else {})}
    return apply_overrides(configlib.from_dict(TrainConfig, fields), overrides)


def _median_ms(fn, probe: int) -> float:
    times = []
    for _ in range(probe):
        begin = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - begin)
    return 1e3 * statistics.median(times)


def data_ms(cfg: TrainConfig, probe: int, mesh) -> float:
    """One batch from the pipeline alone: host batches as the loop gets them, or the device generator."""
    pipeline = build_pipeline(cfg.data)
    synthetic = getattr(pipeline, "synthetic", None)
    if synthetic is not None:
        make = jax.jit(synthetic.batch)
        counter = iter(range(10**9))
        jax.block_until_ready(make(jnp.int32(0)))
        return _median_ms(lambda: make(jnp.int32(next(counter))), probe)
    it = iter(pipeline.dataset)
    next(it)
    ms = _median_ms(lambda: host_batch_to_global(next(it), mesh), probe)
    it.close()
    return ms


def device_steps(cfg: TrainConfig, probe: int, mesh):
    """(steps, state, batch): `steps(state, batch)` runs `probe` train steps on one batch already on the device."""
    pipeline = build_pipeline(cfg.data)
    synthetic = getattr(pipeline, "synthetic", None)
    batch = (jax.jit(synthetic.batch)(jnp.int32(0)) if synthetic is not None
             else host_batch_to_global(next(iter(pipeline.dataset)), mesh))
    built = build_train_call(dataclasses.replace(cfg, on_nan="stop"), mesh, fit_vocab(cfg, pipeline.vocab_size))
    state, step = built.state, built.step
    steps = jax.jit(lambda s, b: jax.lax.fori_loop(0, probe, lambda _, s: step(s, b)[0], s), donate_argnums=0)
    return steps, state, batch


def timed_steps(steps, state, batch, probe: int):
    """(state after two calls, seconds of the first call (compilation included), ms per step of the second) for a
    `device_steps` loop of `probe` steps."""
    begin = time.perf_counter()
    state = jax.block_until_ready(steps(state, batch))  # compiles
    first_call_s = time.perf_counter() - begin
    begin = time.perf_counter()
    state = jax.block_until_ready(steps(state, batch))
    return state, first_call_s, 1e3 * (time.perf_counter() - begin) / probe


def step_ms(cfg: TrainConfig, probe: int, mesh) -> float:
    """One train step on a batch already on the device: a device loop of `probe` steps, per step."""
    return timed_steps(*device_steps(cfg, probe, mesh), probe)[2]


def loop_rate(cfg: TrainConfig, workdir: pathlib.Path) -> dict:
    begin = time.perf_counter()
    summary = train(cfg, workdir, progress=False)
    wall = time.perf_counter() - begin
    rows = [r for r in read_metrics(workdir / "metrics.jsonl") if "tokens_per_s" in r][1:]
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in rows)
    steps_per_s = tokens_per_s / (cfg.data.batch_size * cfg.data.seq_len)
    return {"loop_tokens_per_s": tokens_per_s, "loop_steps_per_s": steps_per_s, "loop_wall_s": wall,
            "final_loss": summary.get("final_loss")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=sorted(CASES), required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--probe", type=int, default=20, help="batches and steps timed alone (0: only the loop)")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--label", default="", help="written into the result (e.g. before/after)")
    p.add_argument("--out", default=None, help="append the result as a JSON line")
    a = p.parse_args(argv)
    overrides = parse_overrides(a.overrides)
    if "steps_per_call" not in {f.name for f in dataclasses.fields(TrainConfig)}:
        overrides.pop("steps_per_call", None)  # an older checkout: one step per call
    cfg = case_config(a.case, overrides)
    mesh = make_mesh(cfg.mesh)
    model_cfg = fit_vocab(cfg, build_pipeline(cfg.data).vocab_size)
    n_params = count_params(model_cfg)
    result = {"case": a.case, "label": a.label, "params": n_params, "device": jax.devices()[0].device_kind,
              "steps_per_call": getattr(cfg, "steps_per_call", 1), "batch": cfg.data.batch_size,
              "seq_len": cfg.data.seq_len, "model": cfg.model, "overrides": overrides}
    if a.probe:
        result.update(data_ms=data_ms(cfg, a.probe, mesh), step_ms=step_ms(cfg, a.probe, mesh))
    with tempfile.TemporaryDirectory() as tmp:
        result.update(loop_rate(cfg, pathlib.Path(tmp)))
    result["loop_ms_per_step"] = 1e3 / result["loop_steps_per_s"]
    result.update(mfu(train_flops_per_token(model_cfg, cfg.data.seq_len), n_params, result["loop_tokens_per_s"],
                      a.peak_tflops * 1e12 * jax.device_count()))
    print(json.dumps(result))
    alone = f"data {result['data_ms']:.2f} ms/batch, step {result['step_ms']:.2f} ms alone, " if a.probe else ""
    print(f"{a.case} {a.label} {cfg.model}: {n_params / 1e6:.1f}M params, {alone}"
          f"loop {result['loop_steps_per_s']:.1f} steps/s "
          f"({result['loop_ms_per_step']:.2f} ms/step, {result['loop_tokens_per_s']:,.0f} tokens/s, "
          f"MFU {result.get('mfu', float('nan')):.1%})")
    if a.out:
        pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
