"""The training loop: mesh, data, sharded state, resume, steps with progress and metrics, checkpoints.

`train(cfg, workdir)` runs one TrainConfig to completion (or until SIGTERM, after which it
saves and returns) and returns a summary dict. Resuming from `workdir` continues the exact
run: the train state, the data iterator's position and the step come back from the latest
checkpoint, so the losses match an uninterrupted run.
"""

import dataclasses
import pathlib
import signal
import time

import jax
import orbax.checkpoint as ocp
from tqdm import tqdm

from ccq_jax.models import count_params, get_config
from ccq_jax.progress import progress as progress_bar
from train.checkpoint import Checkpointer
from train.config import TrainConfig
from train.data import build_pipeline
from train.metrics import MetricsWriter, plot_curves, read_metrics
from train.optim import learning_rate, make_optimizer
from train.sharding import host_batch_to_global, initialize_distributed, make_mesh
from train.step import compile_steps, init_state, make_eval_step, make_train_step

PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # dense bf16, per device


class NonFiniteLoss(RuntimeError):
    pass


def _peak_flops(cfg: TrainConfig) -> float:
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12
    kind = jax.devices()[0].device_kind
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in kind), 0.0)


def _peak_memory_gib() -> float:
    stats = jax.local_devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use", 0) / 2**30


class _Preempted:
    """Turns SIGTERM into a flag the loop checks after each step (then it saves and stops)."""

    def __init__(self):
        self.flag = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._set)
        except ValueError:  # not the main thread: nothing to install
            self._previous = None
        return self

    def _set(self, *_):
        self.flag = True

    def __exit__(self, *_):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def model_config(cfg: TrainConfig, vocab_size: int):
    """The preset with its overrides; the vocabulary grows to the data's if the preset's is smaller."""
    overrides = dict(cfg.model_overrides)
    preset = get_config(cfg.model, **overrides)
    if "vocab_size" not in overrides and preset.vocab_size < vocab_size:
        overrides["vocab_size"] = vocab_size
    elif preset.vocab_size < vocab_size:
        raise ValueError(f"model.vocab_size: {preset.vocab_size} is smaller than the data's vocabulary {vocab_size}")
    return get_config(cfg.model, **overrides)


def evaluate(eval_step, params, cfg: TrainConfig, mesh) -> dict:
    """Loss and recall accuracy on `eval_batches` held-out batches (the data config with another seed)."""
    held_out = dataclasses.replace(cfg.data, seed=cfg.data.seed + 1_000_003, prefetch_batches=0)
    it = iter(build_pipeline(held_out).dataset)
    totals = {}
    for _ in range(cfg.eval_batches):
        out = jax.device_get(eval_step(params, host_batch_to_global(next(it), mesh)))
        totals = {k: totals.get(k, 0.0) + float(v) for k, v in out.items()}
    it.close()
    if not totals:
        return {}
    result = {"eval_loss": totals["loss_sum"] / max(totals["tokens"], 1.0)}
    if totals["recall_scored"]:
        result["eval_recall"] = totals["recall_correct"] / totals["recall_scored"]
    return result


def train(cfg: TrainConfig, workdir, *, progress: bool = True) -> dict:
    """Run `cfg` in `workdir` (resuming from its latest checkpoint); SIGTERM saves and returns early."""
    initialize_distributed()
    with _Preempted() as preempted:
        return _train(cfg, pathlib.Path(workdir), progress, preempted)


def _train(cfg: TrainConfig, workdir: pathlib.Path, progress: bool, preempted: _Preempted) -> dict:
    mesh = make_mesh(cfg.mesh)
    pipeline = build_pipeline(cfg.data)
    mcfg = model_config(cfg, pipeline.vocab_size)
    optimizer = make_optimizer(cfg.optim, cfg.steps)
    graphdef, others, state = init_state(mcfg, optimizer, mesh, cfg.seed)
    train_step, eval_step = compile_steps(
        make_train_step(graphdef, others, optimizer, grad_accum=cfg.grad_accum, skip_nonfinite=cfg.on_nan == "skip",
                        loss_chunk_len=cfg.loss_chunk_len),
        make_eval_step(graphdef, others, cfg.loss_chunk_len), state, mesh)
    n_params = count_params(mcfg)

    it = iter(pipeline.dataset)
    ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=cfg.keep_checkpoints, async_save=cfg.async_checkpoint)
    if ckpt.latest_step() is not None:
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        state = ckpt.restore(ckpt.latest_step(), abstract, it)
    start = int(state.step)
    main_process = jax.process_index() == 0
    if main_process:
        print(f"{cfg.name}: {cfg.model}, {n_params:,} parameters, step {start} of {cfg.steps}, "
              f"mesh {dict(mesh.shape)}", flush=True)

    writer = MetricsWriter(workdir, enabled=main_process)
    lr = learning_rate(cfg.optim, cfg.steps)
    flops_per_token = 6 * n_params
    peak = _peak_flops(cfg) * jax.device_count()
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len
    bar = progress_bar(total=cfg.steps, initial=start, desc=cfg.name, disable=not progress or not main_process)
    last_time, last_step, metrics = time.perf_counter(), start, {}
    unchecked = []  # (step, metrics) whose `finite` flag the host has not read yet

    def check_finite():
        """Reads the flags of the queued steps (a wait for the device), stopping or reporting as on_nan says."""
        for step, m in unchecked:
            if not bool(m["finite"]):
                message = f"step {step}: loss or gradient norm is not finite (loss={float(m['loss'])})"
                if cfg.on_nan == "stop":
                    ckpt.close()
                    raise NonFiniteLoss(message + "; stopping (set on_nan=skip to skip such steps)")
                tqdm.write(message + "; step skipped")
        unchecked.clear()

    for step in range(start, cfg.steps):
        state, metrics = train_step(state, host_batch_to_global(next(it), mesh))
        # a step's flag is read once the next step is queued, so the device never waits for the host
        check_finite()
        unchecked.append((step, metrics))
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            m = jax.device_get(metrics)
            now = time.perf_counter()
            tokens_per_s = tokens_per_step * (done - last_step) / (now - last_time)
            row = {"loss": m["loss"], "grad_norm": m["grad_norm"], "lr": float(lr(step)),
                   "tokens_per_s": tokens_per_s, "peak_memory_gib": _peak_memory_gib()}
            if peak:
                row["mfu"] = flops_per_token * tokens_per_s / peak
            if m["recall_scored"]:
                row["recall"] = m["recall_correct"] / m["recall_scored"]
            writer.write(done, row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)
            last_time, last_step = now, done
        bar.update(1)
        if preempted.flag:
            check_finite()
            ckpt.save(done, state, it, cfg.to_dict(), force=True)
            tqdm.write(f"SIGTERM: saved step {done} to {ckpt.directory}; stopping")
            break
        if done == cfg.steps or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0):
            check_finite()  # never save a state that on_nan="stop" would have refused
            ckpt.save(done, state, it, cfg.to_dict(), force=done == cfg.steps)
    check_finite()
    bar.close()
    ckpt.close()
    it.close()
    writer.close()
    summary = {"name": cfg.name, "model": cfg.model, "seed": cfg.seed, "params": n_params, "steps": int(state.step),
               "preempted": preempted.flag, **({"final_loss": float(metrics["loss"])} if metrics else {})}
    if int(state.step) == cfg.steps:
        summary.update(evaluate(eval_step, state.params, cfg, mesh))
        if main_process:
            plot_curves({cfg.name: read_metrics(writer.path)}, workdir / "loss.png", title=f"{cfg.name}: training loss")
    return summary
