"""Checkpoints through orbax's CheckpointManager: async, atomic (orbax writes to a temporary
directory and renames), keep-N. One checkpoint holds the train state (parameters, optimizer
state, step), the data iterator's state (host data; batches made on the device depend on the
step alone and have none), and the resolved config, so a restart resumes the exact run.
"""

import pathlib

import grain
import orbax.checkpoint as ocp


class Checkpointer:
    def __init__(self, directory, *, max_to_keep: int = 3, async_save: bool = True):
        self.directory = pathlib.Path(directory).absolute()
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 enable_async_checkpointing=async_save),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, data_iterator, config: dict, *, force: bool = False) -> bool:
        """Save `state`, the grain iterator's position (one file per process; None: no iterator) and the config."""
        data = {} if data_iterator is None else {"data": grain.checkpoint.CheckpointSave(data_iterator)}
        return self.manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), config=ocp.args.JsonSave(config), **data),
            force=force,
        )

    def restore(self, step: int, abstract_state, data_iterator):
        """The state of `step`, with `data_iterator` (None: no iterator) moved to where it was (the saved config is
        read by `ccq_jax.checkpoints`). `abstract_state` gives the shapes, dtypes and shardings to restore into.
        """
        data = {} if data_iterator is None else {"data": grain.checkpoint.CheckpointRestore(data_iterator)}
        out = self.manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), **data))
        return out.state

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()
