"""One tiny training run in its own process, for the sharding, resume and multi-process tests.

    python -m tests.train.tiny_run WORKDIR '{"steps": 8, "mesh": {"data": 2, "fsdp": 2, "tensor": 2}}'

The device count (XLA_FLAGS) and a distributed setup (JAX_COORDINATOR_ADDRESS, ...) come
from the environment; the losses land in WORKDIR/metrics.jsonl (every step).
"""

import json
import sys

from ccq_jax import configlib
from train.config import TrainConfig
from train.loop import train


def tiny_config(**changes) -> TrainConfig:
    base = {
        "name": "tiny", "model": "gla-tiny", "model_overrides": {"num_hidden_layers": 1, "hidden_size": 32},
        "data": {"source": "mqar", "seq_len": 32, "batch_size": 8, "prefetch_batches": 0,
                 "mqar": {"vocab_size": 64, "num_kv_pairs": 4, "num_examples": 4096}},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "steps": 8, "log_every": 1, "eval_batches": 1, "checkpoint_every": 2, "async_checkpoint": False,
    }
    for key, value in changes.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) and key != "model_overrides" else value
    return configlib.from_dict(TrainConfig, base)


if __name__ == "__main__":
    summary = train(tiny_config(**json.loads(sys.argv[2])), sys.argv[1], progress=False)
    print(json.dumps(summary))
