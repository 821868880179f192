"""Training metrics: one writer for JSONL and TensorBoard, the tokens/s between reads of the device's metrics,
and the loss-curve PNG drawn at the end.

A resumed run redoes the steps after its checkpoint: the writer, told the step it starts from,
drops the rows of later steps from `metrics.jsonl` (rewritten atomically, with any line a killed
run left half-written) and has TensorBoard discard its events from that step on (`purge_step`),
so every step has one row and the loss curve runs forwards. The end-of-run evaluation is a row of
`eval/...` scalars at the last step; a run resumed from its last step evaluates again, so that row
is dropped too.
"""

import json
import os
import pathlib
import tempfile
import time

import numpy as np

from ccq_jax.figures import pyplot, save_png


def is_eval_row(row: dict) -> bool:
    """Whether a metrics row holds the end-of-run evaluation (`eval/...` scalars) rather than a training step's."""
    return any(key.startswith("eval/") for key in row)


def keep_rows_through(path: pathlib.Path, step: int) -> None:
    """Rewrite the metrics file `path` (if any) with only its rows of steps <= `step`, less an evaluation row of
    `step` itself (the resumed run evaluates again), atomically (a temporary file renamed over it); a line that
    does not parse (cut off by a kill) is dropped too."""
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step", step + 1) <= step \
                and not (row["step"] == step and is_eval_row(row)):
            kept.append(line)
    if kept == lines:
        return
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as f:
        f.write("".join(line + "\n" for line in kept))
    os.replace(f.name, path)


class MetricsWriter:
    """Appends `{"step": s, **scalars}` lines to `<workdir>/metrics.jsonl` and the same scalars to TensorBoard.

    start_step: the step the run starts (or resumes) from; rows and events of later steps are dropped.
    """

    def __init__(self, workdir, enabled: bool = True, *, start_step: int = 0):
        self.path = pathlib.Path(workdir) / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        if enabled:
            from tensorboardX import SummaryWriter

            self.path.parent.mkdir(parents=True, exist_ok=True)
            keep_rows_through(self.path, start_step)
            self._tb = SummaryWriter(str(self.path.parent / "tensorboard"), purge_step=start_step + 1)

    def write(self, step: int, scalars: dict):
        if not self.enabled:
            return
        row = {"step": int(step), **{k: float(v) for k, v in scalars.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        for key, value in row.items():
            if key != "step":
                self._tb.add_scalar(key, value, row["step"])

    def flush(self):
        """Write TensorBoard's pending events (at every checkpoint: a killed run keeps what it checkpointed)."""
        if self._tb is not None:
            self._tb.flush()

    def close(self):
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class ReadRates:
    """Tokens/s between the host's reads of the train calls' metrics.

    On the H200 a call's metrics reached the host only once the call queued behind it had ended too: a read with
    no call behind it (before a checkpoint, after the last call) found its metrics already there, and its
    interval read 132M-243M tokens/s. In a stream of equal calls each interval between reads still spans one
    call, so a read `behind` another call reports its interval; a read with none behind it reports the mean
    rate since the first read (whose interval holds the compilation). On a CPU the two agree.
    """

    def __init__(self, start_step: int, tokens_per_step: int, clock=time.perf_counter):
        self.tokens_per_step, self.clock = tokens_per_step, clock
        self.last = (clock(), start_step)  # (time, steps done) at the latest read
        self.first = None  # the same at the first read

    def read(self, steps_done: int, behind: bool) -> float:
        """Record a read after `steps_done` steps; its tokens/s."""
        now = self.clock()
        since = self.last if behind or self.first is None else self.first
        rate = self.tokens_per_step * (steps_done - since[1]) / (now - since[0])
        self.last = (now, steps_done)
        self.first = self.first or self.last
        return rate


def read_metrics(path, rows: str = "train") -> list[dict]:
    """The rows of a metrics file: "train" the training steps' (the default: what curves and step tables read),
    "eval" the end-of-run evaluation's (`is_eval_row`), "all" both in file order; [] for no file."""
    if rows not in ("train", "eval", "all"):
        raise ValueError(f"rows: expected 'train', 'eval' or 'all', got {rows!r}")
    path = pathlib.Path(path)
    if not path.exists():
        return []
    out = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out if rows == "all" else [r for r in out if is_eval_row(r) == (rows == "eval")]


def plot_curves(runs: dict, out_png, key: str = "loss", title: str = "training loss"):
    """One curve of `key` against step per run: runs = {label: [metric rows]}."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, rows in runs.items():
        points = [(r["step"], r[key]) for r in rows if key in r]
        if points:
            steps, values = np.array(points).T
            ax.plot(steps, values, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_png(fig, out_png)
