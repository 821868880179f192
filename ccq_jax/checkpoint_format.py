"""The format of a ccq-train checkpoint: its writer and its reader, in one module.

A run's workdir holds `checkpoints/<step>/`, one folder per saved step (orbax's CheckpointManager), with
    state/                  `STATE`: the train state `TrainState(params, opt_state, step)` (orbax's standard
                            PyTree format, each leaf in its shards)
    config/                 `CONFIG`: the run's TrainConfig as JSON (`TrainConfig.to_dict()`: its `model`
                            preset and `model_overrides`, data, optimizer, ...)
    data/                   `DATA`: the grain iterator's position, one file per process (host data only;
                            batches made on the device depend on the step alone)
    ccq_manifest.json       the step's files, sizes and CRC-32s (`ccq_jax.checkpoint_manifest`)

`save` and `restore_state` are the writer and the training loop's reader (`train.checkpoint.Checkpointer`
decides when to save, how many steps to keep, and writes the manifests); `checkpoint_step_dir`,
`read_train_config`, `stored_params` and `restore_params` are the readers of the model's side
(`ccq_jax.models.pretrained`, `ccq_jax.checkpoints`, ccq-eval): the parameters alone, onto one device.
"""

import logging
import pathlib
from contextlib import contextmanager

import grain
import orbax.checkpoint as ocp

from ccq_jax.cli import user_path

STATE, CONFIG, DATA = "state", "config", "data"


def save(manager: ocp.CheckpointManager, step: int, state, config: dict, data_iterator=None, *,
         force: bool = False) -> bool:
    """Save step `step`: the train state, the config dict and the grain iterator's position (None: no iterator).
    Returns whether the manager saved it (its save interval may skip a step unless `force`)."""
    data = {} if data_iterator is None else {DATA: grain.checkpoint.CheckpointSave(data_iterator)}
    items = {STATE: ocp.args.StandardSave(state), CONFIG: ocp.args.JsonSave(config), **data}
    return manager.save(step, args=ocp.args.Composite(**items), force=force)


def restore_state(manager: ocp.CheckpointManager, step: int, abstract_state, data_iterator=None):
    """The train state of `step`, restored into `abstract_state`'s shapes, dtypes and shardings, with
    `data_iterator` (None: no iterator) moved to where it was."""
    data = {} if data_iterator is None else {DATA: grain.checkpoint.CheckpointRestore(data_iterator)}
    out = manager.restore(step, args=ocp.args.Composite(**{STATE: ocp.args.StandardRestore(abstract_state)},
                                                        **data))
    return out[STATE]


@contextmanager
def quiet_orbax():
    """Orbax logs warnings through absl for a read-only restore of one item (missing manager metadata)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def is_step_dir(path: pathlib.Path) -> bool:
    """Whether `path` is the folder of one saved step."""
    return (path / STATE).is_dir() and (path / CONFIG).is_dir()


def checkpoint_step_dir(path, step: int | None = None) -> pathlib.Path:
    """The folder of one saved step: `path` is a ccq-train workdir, its `checkpoints/` folder or a step's folder.

    step: which saved step (default: the latest); not allowed when `path` is a step's folder.
    """
    path = user_path(path)
    if is_step_dir(path):
        if step is not None and path.name != str(step):
            raise ValueError(f"step: {path} is the folder of step {path.name}; got step={step}")
        return path
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    steps = ocp.utils.checkpoint_steps(root) if root.is_dir() else []
    if not steps:
        raise ValueError(f"checkpoint: {path} is neither a saved model folder (no config.json) nor a ccq-train "
                         f"workdir, checkpoints folder or step folder (no saved step found in {root})")
    if step is None:
        step = max(steps)
    elif step not in steps:
        raise ValueError(f"step: {step} is not saved in {root}; saved steps: {sorted(steps)}")
    return root / str(step)


def read_train_config(step_dir) -> dict:
    """The TrainConfig dict stored with a checkpoint."""
    with quiet_orbax():
        return ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(user_path(step_dir) / CONFIG)


def stored_params(step_dir: pathlib.Path):
    """The metadata tree (shapes and dtypes, nothing read) of the parameters a step stores."""
    with quiet_orbax():
        return ocp.PyTreeCheckpointer().metadata(step_dir / STATE).item_metadata.tree["params"]


def restore_params(step_dir: pathlib.Path, target):
    """The parameters of a step restored into `target` (`ShapeDtypeStruct`s with their shardings): an orbax
    partial restore, the optimizer state left unread."""
    target = {"params": target}
    with quiet_orbax():
        restored = ocp.PyTreeCheckpointer().restore(step_dir / STATE, args=ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True))
    return restored["params"]
