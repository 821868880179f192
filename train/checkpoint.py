"""The training loop's checkpoint policy, through orbax's CheckpointManager: async, atomic (orbax writes to a
temporary directory and renames), keep-N. One checkpoint holds the train state (parameters, optimizer
state, step), the data iterator's state (host data; batches made on the device depend on the
step alone and have none), and the resolved config, so a restart resumes the exact run. The format, its
writer and its readers (the loop's and eval's) are `ccq_jax.checkpoint_format`'s.

A workdir is resumed only by the run that wrote it: `resume_conflicts` names the settings of the current config
that differ from the saved one, other than those of `MAY_CHANGE_ON_RESUME` (how the run is executed and
reported, not what it computes). Resuming another seed, model, data or schedule from a finished checkpoint
would otherwise train nothing, or something else, and say nothing.

Each saved step gets a manifest of its files' sizes and CRC-32s once orbax has finished writing
it (`ccq_jax.checkpoint_manifest`; process 0 writes it); `usable_step` checks the latest step
against it before a resume. A damaged step stops the run, naming the file and the previous kept
step, or with `on_damaged_checkpoint="previous"` the run resumes from the latest whole step and
the damaged ones are moved to `<workdir>/damaged-checkpoints/` (kept, out of orbax's way).
"""

import json
import pathlib
import shutil

import jax
import orbax.checkpoint as ocp

from ccq_jax import checkpoint_format
from ccq_jax.checkpoint_manifest import verified_step, write_manifest
from ccq_jax.models import get_config
from ccq_jax.models.config import saved_overrides


# dotted config keys (and their sub-keys) a resumed run may change
MAY_CHANGE_ON_RESUME = ("name", "mesh", "log_every", "steps_per_call", "eval_batches", "checkpoint_every",
                        "keep_checkpoints", "async_checkpoint", "on_nan", "on_damaged_checkpoint", "peak_tflops", "loss_chunk_len",
                        "checks", "data.read_threads", "data.prefetch_batches")


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resume_conflicts(saved: dict, current: dict) -> list[str]:
    """The dotted keys whose values differ between a checkpoint's saved config and the current one (both as
    `TrainConfig.to_dict()` gives them), except MAY_CHANGE_ON_RESUME and its sub-keys: "key: saved -> current"."""
    saved = {**saved, "model_overrides": saved_overrides(get_config(saved["model"]).family,
                                                        saved.get("model_overrides", {}))}  # pre-kernel-policy keys
    old, new = _flat(saved), _flat(json.loads(json.dumps(current)))
    may_change = lambda key: any(key == k or key.startswith(k + ".") for k in MAY_CHANGE_ON_RESUME)
    return [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(set(old) | set(new))
            if not may_change(key) and old.get(key) != new.get(key)]


class Checkpointer:
    def __init__(self, directory, *, max_to_keep: int = 3, async_save: bool = True):
        self.directory = pathlib.Path(directory).absolute()
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 enable_async_checkpointing=async_save),
        )
        self._unlisted = []  # saved steps whose manifest is not written yet (their save may still be running)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def _write_manifests(self):
        """Wait for the saves in flight, then write the manifest of each step they saved (and keep-N kept)."""
        if not self._unlisted:
            return
        self.manager.wait_until_finished()
        for step in self._unlisted:
            if jax.process_index() == 0 and (self.directory / str(step)).is_dir():
                write_manifest(self.directory / str(step))
        self._unlisted = []

    def usable_step(self, on_damaged: str) -> int | None:
        """The latest saved step (None: none) once its files match its manifest; a damaged one raises
        DamagedCheckpoint, or with on_damaged="previous" gives way to the latest whole step (the damaged steps are
        moved to <workdir>/damaged-checkpoints/)."""
        latest = self.latest_step()
        if latest is None:
            return None
        step = verified_step(self.directory, latest, previous=on_damaged == "previous")
        if step != latest and jax.process_index() == 0:
            aside = self.directory.parent / "damaged-checkpoints"
            aside.mkdir(exist_ok=True)
            for later in (s for s in self.manager.all_steps() if s > step):
                shutil.move(self.directory / str(later), aside / str(later))
        if step != latest:
            self.manager.reload()
        return step

    def save(self, step: int, state, data_iterator, config: dict, *, force: bool = False) -> bool:
        """Save `state`, the grain iterator's position (one file per process; None: no iterator) and the config."""
        self._write_manifests()
        saved = checkpoint_format.save(self.manager, step, state, config, data_iterator, force=force)
        if saved:
            self._unlisted.append(step)
        return saved

    def restore(self, step: int, abstract_state, data_iterator):
        """The state of `step`, with `data_iterator` (None: no iterator) moved to where it was (the saved config is
        read by `ccq_jax.checkpoint_format.read_train_config`). `abstract_state` gives the shapes, dtypes and
        shardings to restore into.
        """
        return checkpoint_format.restore_state(self.manager, step, abstract_state, data_iterator)

    def close(self):
        self.manager.wait_until_finished()
        self._write_manifests()
        self.manager.close()
