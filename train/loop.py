"""The training loop: mesh, data, sharded state, resume, steps with progress and metrics, checkpoints.

`train(cfg, workdir)` runs one TrainConfig to completion (or until SIGTERM, after which it
saves and returns) and returns a summary dict. Resuming from `workdir` continues the exact
run: the train state, the data iterator's position (host data) and the step come back from the
latest checkpoint, so the losses match an uninterrupted run.

Steps run `steps_per_call` at a time in one device program (`train.step.build_train_call`);
a call ends early at a checkpoint and at the last step, SIGTERM is looked at between calls,
and every step's metrics come back, so logging and the non-finite checks stay per step.
Synthetic tasks make their batches on the device; host batches of a call are stacked and sent
while the call before runs.

Before anything compiles, the workdir must take a file and hold `keep_checkpoints` checkpoints
(parameters and optimizer state each). At the end, the held-out evaluation goes to the summary
and, as `eval/...` scalars at the last step, to metrics.jsonl and TensorBoard. The accuracy at
the scored positions is `recall` on the synthetic recall tasks and `next_token_accuracy` on text,
where every target is scored.
"""

import contextlib
import dataclasses
import pathlib
import shutil
import signal
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from tqdm import tqdm

from ccq_jax.cli import user_path
from ccq_jax.checkpoint_format import checkpoint_step_dir, read_train_config
from ccq_jax.engagement import read_engagement
from ccq_jax.models import count_params
from ccq_jax.models.flops import FlopCount, mfu, train_flops_per_token
from ccq_jax.progress import progress as progress_bar
from train.checkpoint import Checkpointer, resume_conflicts
from train.config import TrainConfig, fit_vocab
from train.data import build_pipeline
from train.errors import NonFiniteLoss
from train.data.config import SYNTHETIC_SOURCES
from train.metrics import MetricsWriter, ReadRates, plot_curves, read_metrics
from train.optim import learning_rate
from train.sharding import host_batch_to_global, initialize_distributed, make_mesh, replicated
from train.step import build_train_call, compile_eval_step, compile_synthetic_eval, make_eval_step

PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # dense bf16, per device


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


def _held_out(cfg: TrainConfig):
    """The data config of the held-out batches: the training data's with another seed."""
    return dataclasses.replace(cfg.data, seed=cfg.data.seed + 1_000_003, prefetch_batches=0)


def _eval_totals(eval_step, state, cfg: TrainConfig, mesh) -> dict:
    """Summed loss, tokens and recall counts of `eval_batches` held-out batches."""
    held_out = build_pipeline(_held_out(cfg))
    if held_out.synthetic is not None:
        sums = compile_synthetic_eval(eval_step, state, mesh, held_out.synthetic.batch, cfg.eval_batches)
        return {k: float(v) for k, v in jax.device_get(sums(state.params)).items()}
    it = iter(held_out.dataset)
    totals = {}
    for _ in range(cfg.eval_batches):
        out = jax.device_get(eval_step(state.params, host_batch_to_global(next(it), mesh)))
        totals = {k: totals.get(k, 0.0) + float(v) for k, v in out.items()}
    it.close()
    return totals


def accuracy_name(cfg: TrainConfig) -> str:
    """What the accuracy at the scored positions is: "recall" on a synthetic recall task (the recalled values),
    "next_token_accuracy" on text (every target is scored)."""
    return "recall" if cfg.data.source in SYNTHETIC_SOURCES else "next_token_accuracy"


def evaluate(eval_step, state, cfg: TrainConfig, mesh) -> dict:
    """Loss and accuracy (`eval_recall` or `eval_next_token_accuracy`, `accuracy_name`) on `eval_batches` held-out
    batches (the data config with another seed)."""
    if not cfg.eval_batches:
        return {}
    totals = _eval_totals(eval_step, state, cfg, mesh)
    result = {"eval_loss": totals["loss_sum"] / max(totals["tokens"], 1.0)}
    if totals["recall_scored"]:
        result[f"eval_{accuracy_name(cfg)}"] = totals["recall_correct"] / totals["recall_scored"]
    return result


def eval_scalars(results: dict) -> dict:
    """The summary's evaluation keys (`eval_loss`, ..., `read_lambda`, ...) as namespaced scalars to log (`eval/loss`,
    `eval/read_lambda`, ...)."""
    return {f"eval/{key.removeprefix('eval_')}": value for key, value in results.items()}


READ_ROWS = 16  # held-out rows the read's engagement is measured on


def read_summary(graphdef, others, state, cfg: TrainConfig, mcfg) -> dict:
    """A CCQ model's read engagement (`ccq_jax.engagement`) on the first `READ_ROWS` rows of the first held-out
    batch, the scored positions (MQAR's queries; every target on text) as positions: mean lambda, the applied
    contraction |q - q_clean| / |q| over all tokens and at the scored ones, eig_max and the effective rank of
    Sigma. {} for a model (config `mcfg`) without a CCQ read, or with it off: its parameters stay where they are."""
    ccq = getattr(mcfg, "ccq", None)
    if ccq is None or not ccq.active or not cfg.eval_batches:
        return {}
    model = nnx.merge(graphdef, jax.device_get(state.params), others)
    held_out = build_pipeline(_held_out(cfg))
    if held_out.synthetic is not None:
        batch = held_out.synthetic.batch(jnp.int32(0))
    else:
        it = iter(held_out.dataset)
        batch = next(it)
        it.close()
    rows = {k: np.asarray(batch[k])[:READ_ROWS] for k in ("input_ids", "segment_ids", "loss_mask")}
    s = read_engagement(model, rows["input_ids"], segment_ids=rows["segment_ids"], positions=rows["loss_mask"] > 0)
    s = s["summary"]
    return {"read_lambda": s["lambda_mean"], "read_applied": s["applied_mean"],
            "read_applied_at_scored": s["applied_at_positions"], "read_eig_max": s["sigma_top1"],
            "read_effective_rank": s["effective_rank"]}


def train(cfg: TrainConfig, workdir, *, progress: bool = True) -> dict:
    """Run `cfg` in `workdir` (resuming from its latest checkpoint); SIGTERM saves and returns early."""
    initialize_distributed()
    with _Preempted() as preempted:
        return _train(cfg, user_path(workdir), progress, preempted)


class _Reporter:
    """Turns the stacked metrics of finished calls into log rows, progress and non-finite checks.

    A call's metrics are read once the next call is queued, so the device never waits for the host.
    """

    def __init__(self, cfg: TrainConfig, writer: MetricsWriter, bar, n_params: int, flops: FlopCount, start: int,
                 resumed: str = ""):
        """resumed: what a non-finite first step says of the checkpoint it resumed from ("": not resumed)."""
        self.cfg, self.writer, self.bar = cfg, writer, bar
        self.start, self.resumed = start, resumed
        self.lr = learning_rate(cfg.optim, cfg.steps)
        self.n_params, self.flops = n_params, flops  # MFU's numerators (`ccq_jax.models.flops`)
        self.peak = _peak_flops(cfg) * jax.device_count()
        self.rates = ReadRates(start, cfg.data.batch_size * cfg.data.seq_len)
        self.pending = None  # (first step, number of steps, stacked metrics) of the call in flight
        self.final = {}

    def queue(self, first: int, n: int, metrics):
        """Record a dispatched call; report the one before it.

        The call's metrics start copying to the host now, right behind the call (on the H200 they still arrived
        only after the call behind it; `ReadRates` says how the rates allow for that).
        """
        for leaf in jax.tree.leaves(metrics):
            leaf.copy_to_host_async()
        self._read(behind=True)
        self.pending = (first, n, metrics)

    def flush(self):
        """Report the call in flight (a wait for the device): log rows, progress, on_nan."""
        self._read(behind=False)

    def _read(self, behind: bool):
        """Report the pending call; `behind`: another call is queued behind it (`ReadRates`)."""
        if self.pending is None:
            return
        first, n, metrics = self.pending
        self.pending = None
        m = jax.device_get(metrics)
        tokens_per_s = self.rates.read(first + n, behind)
        for i in range(n):
            step, done = first + i, first + i + 1
            if not m["finite"][i]:
                message = f"step {step}: loss or gradient norm is not finite (loss={float(m['loss'][i])})"
                if step == self.start and self.resumed:  # a damaged checkpoint, not a diverging run
                    message, advice = f"{message}, {self.resumed}", ""
                else:
                    advice = "; stopping (set on_nan=skip to skip such steps)"
                if self.cfg.on_nan == "stop":
                    raise NonFiniteLoss(message + advice)
                tqdm.write(message + "; step skipped")
            if done % self.cfg.log_every == 0 or done == self.cfg.steps:
                row = {"loss": m["loss"][i], "grad_norm": m["grad_norm"][i], "lr": float(self.lr(step)),
                       "tokens_per_s": tokens_per_s, "peak_memory_gib": _peak_memory_gib()}
                row.update(mfu(self.flops, self.n_params, tokens_per_s, self.peak))
                if m["recall_scored"][i]:
                    row[accuracy_name(self.cfg)] = m["recall_correct"][i] / m["recall_scored"][i]
                self.writer.write(done, row)
                self.bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)
        self.final = {"final_loss": float(m["loss"][n - 1])}
        self.bar.update(n)


def _call_length(cfg: TrainConfig, step: int) -> int:
    """Steps of the call starting at `step`: up to steps_per_call, ending at the next checkpoint or the last step."""
    end = cfg.steps
    if cfg.checkpoint_every:
        end = min(end, (step // cfg.checkpoint_every + 1) * cfg.checkpoint_every)
    return min(cfg.steps_per_call, end - step)


def _host_batches(it, n: int, steps_per_call: int, mesh) -> dict:
    """The next n host batches stacked [steps_per_call, ...] (zeros after the n-th) as global arrays."""
    rows = [next(it) for _ in range(n)]
    rows += [jax.tree.map(np.zeros_like, rows[0])] * (steps_per_call - n)
    return host_batch_to_global({k: np.stack([row[k] for row in rows]) for k in rows[0]}, mesh, stacked=True)


def check_writable(workdir: pathlib.Path) -> None:
    """ValueError naming `workdir` unless a file can be written in it (made if missing): found before compiling,
    not at the first checkpoint."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=workdir):
            pass
    except OSError as err:
        raise ValueError(f"workdir: cannot write to {workdir}: {err.strerror or err}") from err


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_free_space(workdir: pathlib.Path, state_bytes: int, keep: int) -> None:
    """ValueError naming `workdir` unless its disk has room for `keep` checkpoints of `state_bytes` each (parameters
    and optimizer state; the checkpoints already in <workdir>/checkpoints count as room, a resumed run replaces
    them). A modest estimate, found before compiling rather than at the first checkpoint."""
    held = sum(p.stat().st_size for p in (workdir / "checkpoints").rglob("*") if p.is_file())
    needed = state_bytes * max(keep, 1) - held
    free = shutil.disk_usage(workdir).free
    if free < needed:
        raise ValueError(f"workdir: {workdir} has {_gib(free)} free; keep_checkpoints={keep} checkpoints of "
                         f"{_gib(state_bytes)} each (parameters and optimizer state) need about {_gib(needed)} more "
                         f"than its checkpoints hold; free some space, lower keep_checkpoints or use another workdir")


def resumed_note(directory: pathlib.Path, step: int, kept) -> str:
    """What a non-finite first step after resuming from checkpoint `step` in `directory` says: that checkpoint may be
    damaged, and the way to the previous of the `kept` steps."""
    earlier = [s for s in kept if s < step]
    way = (f"move {directory / str(step)} out of {directory} (e.g. to {directory.parent / 'damaged-checkpoints'}) to "
           f"resume from step {max(earlier)}, the previous kept one" if earlier else
           "no earlier step is kept; train again in a new workdir")
    return (f"the first step after resuming from checkpoint step {step} in {directory}; that checkpoint may be "
            f"damaged: {way}")


def _train(cfg: TrainConfig, workdir: pathlib.Path, progress: bool, preempted: _Preempted) -> dict:
    begin = time.perf_counter()
    check_writable(workdir)
    # each closed on every way out: a normal end, SIGTERM, an error, on_nan=stop; `logs` (the metrics writer) last,
    # after the evaluation is logged
    with contextlib.ExitStack() as logs, contextlib.ExitStack() as cleanup:
        ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=cfg.keep_checkpoints,
                            async_save=cfg.async_checkpoint)
        cleanup.callback(ckpt.close)  # closed last: waits for the last save
        resume = ckpt.usable_step(cfg.on_damaged_checkpoint)
        if resume is not None:
            saved = read_train_config(checkpoint_step_dir(ckpt.directory, resume))
            conflicts = resume_conflicts(saved, cfg.to_dict())
            if conflicts:
                raise ValueError(f"workdir: {workdir} holds a checkpoint of a run with other settings "
                                 f"({'; '.join(conflicts)}); resume it with its own config, or train in another "
                                 f"workdir")
        mesh = make_mesh(cfg.mesh)
        pipeline = build_pipeline(cfg.data)
        mcfg = fit_vocab(cfg, pipeline.vocab_size)
        synthetic = pipeline.synthetic
        make_batch = synthetic.batch if synthetic is not None else None
        abstract = build_train_call(cfg, mesh, mcfg, make_batch, abstract=True).state
        check_free_space(workdir, sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract)),
                         cfg.keep_checkpoints)
        graphdef, others, state, _, run_call = build_train_call(cfg, mesh, mcfg, make_batch)
        eval_step = compile_eval_step(make_eval_step(graphdef, others, cfg.loss_chunk_len), state, mesh)
        n_params = count_params(mcfg)

        it = iter(pipeline.dataset) if synthetic is None else None
        if it is not None:
            cleanup.callback(it.close)
        if resume is not None:
            state = ckpt.restore(resume, jax.tree.map(ocp.utils.to_shape_dtype_struct, state), it)
        start = int(state.step)
        main_process = jax.process_index() == 0
        if main_process:
            print(f"{cfg.name}: {cfg.model}, {n_params:,} parameters, step {start} of {cfg.steps}, "
                  f"mesh {dict(mesh.shape)} (set up in {time.perf_counter() - begin:.0f} s)", flush=True)

        writer = MetricsWriter(workdir, enabled=main_process, start_step=start)
        logs.callback(writer.close)  # an open tensorboardX writer aborts the process at exit (SIGABRT)
        bar = progress_bar(total=cfg.steps, initial=start, desc=cfg.name, disable=not progress or not main_process)
        cleanup.callback(bar.close)
        resumed = "" if resume is None else resumed_note(ckpt.directory, start, ckpt.manager.all_steps())
        report = _Reporter(cfg, writer, bar, n_params, train_flops_per_token(mcfg, cfg.data.seq_len), start, resumed)
        step = start
        while step < cfg.steps:
            n = _call_length(cfg, step)
            n_device = jax.device_put(np.int32(n), replicated(mesh))
            if synthetic is not None:
                state, metrics = run_call(state, n_device)
            else:
                state, metrics = run_call(state, n_device, _host_batches(it, n, cfg.steps_per_call, mesh))
            report.queue(step, n, metrics)
            step += n
            if preempted.flag:
                report.flush()
                ckpt.save(step, state, it, cfg.to_dict(), force=True)
                writer.flush()
                tqdm.write(f"SIGTERM: saved step {step} to {ckpt.directory}; stopping")
                break
            if step == cfg.steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                report.flush()  # never save a state that on_nan="stop" would have refused
                ckpt.save(step, state, it, cfg.to_dict(), force=step == cfg.steps)
                writer.flush()
        report.flush()
        stepped = time.perf_counter()
        cleanup.close()  # the bar, the iterator, then the checkpointer's last save
        if main_process:
            print(f"{cfg.name}: at step {int(state.step)} after {stepped - begin:.0f} s; checkpoints written "
                  f"{time.perf_counter() - stepped:.0f} s later", flush=True)
        summary = {"name": cfg.name, "model": cfg.model, "seed": cfg.seed, "params": n_params,
                   "steps": int(state.step), "preempted": preempted.flag, **report.final}
        if int(state.step) == cfg.steps:
            results = {**evaluate(eval_step, state, cfg, mesh),
                       **read_summary(graphdef, others, state, cfg, mcfg)}
            if results:
                writer.write(cfg.steps, eval_scalars(results))
            summary.update(results)
            if main_process:
                plot_curves({cfg.name: read_metrics(writer.path)}, workdir / "loss.png",
                            title=f"{cfg.name}: training loss")
    return summary
