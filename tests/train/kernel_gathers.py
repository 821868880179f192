"""The all-gathers of kernel operands in a sharded train step: compile one call of the tiny model's step with
impl="pallas" (interpreted) on a 2 x 2 x 2 data/fsdp/tensor mesh and print the all-gathers whose result is a
rank-4 array, the kernels' [B, T, H, D] inputs and [B, H, K, V] states (the model's own activations are rank 3).
Run by tests/train/test_training.py in a process with 8 fake CPU devices.

    python -m tests.train.kernel_gathers
"""

import re

import jax
import numpy as np

from tests.train.tiny_run import tiny_config
from train.config import fit_vocab
from train.data import build_pipeline
from train.sharding import make_mesh, replicated
from train.step import build_train_call

RANK4_ALL_GATHER = re.compile(r"= (\w+\[\d+,\d+,\d+,\d+\])\S* all-gather\(")


def main():
    cfg = tiny_config(model_overrides={"num_hidden_layers": 1, "hidden_size": 32, "kernel.impl": "pallas"},
                      mesh={"data": 2, "fsdp": 2, "tensor": 2}, steps_per_call=1)
    mesh = make_mesh(cfg.mesh)
    pipeline = build_pipeline(cfg.data)
    built = build_train_call(cfg, mesh, fit_vocab(cfg, pipeline.vocab_size), pipeline.synthetic.batch)
    state, call = built.state, built.run
    hlo = call.lower(state, jax.device_put(np.int32(1), replicated(mesh))).compile().as_text()
    gathers = RANK4_ALL_GATHER.findall(hlo)
    print(f"all-gathers {hlo.count(' all-gather(')}, of rank-4 arrays {len(gathers)}: {sorted(set(gathers))}")


if __name__ == "__main__":
    main()
