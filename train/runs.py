"""Named training runs for `ccq-train --config NAME`, and `load_config`, which reads a name or a YAML file.

`mqar-tiny`: the demo's recipe, one run per model: tiny GLA, CCQ-GLA, Gated DeltaNet and
CCQ-Gated DeltaNet on synthetic MQAR (no download), seed 0. `benchmarks/demo_seeds.py` runs it
over seeds and the learning guard (tests/train/test_learning.py) on a seed of its own.
`demo`: that recipe on DEMO_SEEDS, so the closing table shows each model's spread over seeds
and CCQ's difference to its own backbone beside it; about five minutes on a 2-core CPU.
`smoke`: one tiny GLA for 20 steps, 5 of them warmup (checks an install in seconds).
`pretrain-1.3b`: the 1.3B linear-attention presets (GLA, Gated DeltaNet, KDA, each with and without
CCQ, GDN-2 and CCQ-GDN-2) on `ccq-prepare-data` shards in data/shards: 4096-token rows, 0.5M tokens a step (128
rows in 4 microbatches), bf16 compute on fp32 parameters, the Pallas kernels, each block
recomputed in the backward pass, FSDP over every device, 20,000 steps (10.5B tokens). `ccq-compile --config pretrain-1.3b --topology v5p:2x2x1`
checks it for a pod slice on a CPU (docs/tpu.md has per-chip memory on v5p-8 and v6e-8).

The recipe (docs/learning.md has the 10-seed table and what made the previous one fragile):
4 key-value pairs in 16 tokens, 32 sequences a step, 1000 steps of AdamW at 3e-3, and an
initialisation of N(0, 0.05) instead of fla's 0.02, which at this width starts GLA's q/k/v
gradients about 2,400x below the MLP's (13x at 0.05).
"""

import dataclasses
from typing import Any

from ccq_jax import configlib
from train.config import TrainConfig, apply_overrides
from train.data.config import DataConfig, MQARConfig
from train.optim import OptimConfig
from train.sharding import MeshConfig

DEMO_MODELS = ("gla-tiny", "ccq-gla-tiny", "gdn-tiny", "ccq-gdn-tiny")
DEMO_SEEDS = (0, 1)


def _mqar_run(model: str, steps: int, warmup_steps: int = 50) -> TrainConfig:
    # short convolutions on every linear model (fla's GLA default leaves them off): they let one layer
    # bind a key to the value after it, so recall is learned in hundreds of steps instead of thousands
    return TrainConfig(
        name=model, model=model,
        model_overrides={"use_short_conv": True, "kernel.chunk_size": 16, "initializer_range": 0.05},
        data=DataConfig(source="mqar", seq_len=16, batch_size=32,
                        mqar=MQARConfig(vocab_size=64, num_kv_pairs=4, num_examples=50_000,
                                        random_non_queries=False)),
        optim=OptimConfig(lr=3e-3, warmup_steps=warmup_steps, weight_decay=0.0, min_lr_ratio=0.1),
        steps=steps, log_every=25, eval_batches=8, checkpoint_every=0, keep_checkpoints=1,
    )


def _pretrain_run(model: str) -> TrainConfig:
    return TrainConfig(
        name=model, model=model,
        model_overrides={"dtype": "bfloat16", "param_dtype": "float32", "kernel.impl": "pallas",
                         "scan_layers": True, "remat_policy": "block"},
        data=DataConfig(source="array_record", paths=("data/shards",), seq_len=4096, batch_size=128),
        optim=OptimConfig(lr=3e-4, warmup_steps=1000, weight_decay=0.1, min_lr_ratio=0.1),
        mesh=MeshConfig(data=1, fsdp=-1), grad_accum=4, steps=20_000, log_every=50, steps_per_call=1,
        eval_batches=0, checkpoint_every=1000,
    )


def _seeded(run: TrainConfig, seed: int) -> TrainConfig:
    """The run with model initialisation and data order from `seed`, named after it."""
    return dataclasses.replace(run, name=f"{run.name}-seed{seed}", seed=seed,
                               data=dataclasses.replace(run.data, seed=seed))


RUNS = {
    "mqar-tiny": lambda: [_mqar_run(m, steps=1000) for m in DEMO_MODELS],
    "demo": lambda: [_seeded(_mqar_run(m, steps=1000), s) for m in DEMO_MODELS for s in DEMO_SEEDS],
    "smoke": lambda: [_mqar_run("gla-tiny", steps=20, warmup_steps=5)],
    "pretrain-1.3b": lambda: [_pretrain_run(f"{m}-1.3b") for m in ("gla", "ccq-gla", "gdn", "ccq-gdn", "kda", "ccq-kda",
                                                                  "gdn2", "ccq-gdn2")],
}


def load_config(name_or_path: str, overrides: dict[str, Any] | None = None) -> list[TrainConfig]:
    """The runs of a named config (`RUNS`) or of a YAML file, with overrides (`apply_overrides`) applied to each."""
    if name_or_path in RUNS:
        runs = RUNS[name_or_path]()
    elif name_or_path.endswith((".yaml", ".yml")):
        data = configlib.load_yaml(name_or_path)
        if not data:  # an empty file trained the defaults (a long run nobody asked for) without a word
            raise ValueError(f"{name_or_path}: holds no settings; expected a mapping of run settings (steps, model, "
                             f"data, ...) or a list of them under 'runs'")
        runs = data.pop("runs", [data])
        if not isinstance(runs, list):
            raise ValueError(f"runs: expected a list of run configs in {name_or_path}, got {type(runs).__name__}")
        if not runs:
            raise ValueError(f"runs: expected a non-empty list of run configs in {name_or_path}, got []")
        runs = [configlib.from_dict(TrainConfig, run) for run in runs]
    else:
        raise ValueError(f"--config: expected a YAML file or one of {sorted(RUNS)}"
                         f"{configlib.suggestion(name_or_path, RUNS)}, got {name_or_path!r}")
    return [apply_overrides(run, overrides or {}) for run in runs]


def select_runs(runs, only: str | None):
    """The runs named in the comma-separated `only` (all of them when None), in the config's order."""
    if only is None:
        return runs
    names = [r.name for r in runs]
    wanted = only.split(",")
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise ValueError(f"--only: expected names of this config's runs {names}, got {unknown}")
    return [r for r in runs if r.name in wanted]
