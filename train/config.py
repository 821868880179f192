"""The training run's config: model preset (+ overrides), data, optimizer, mesh, loop and checkpoints.

`train.runs.load_config(name_or_path, overrides)` takes a YAML file or a named run and `--set key=value`
overrides (`apply_overrides`). Keys under `model.` go to the model preset (`get_config` checks
them against the model's own fields); everything else is validated against these dataclasses
and unknown keys are rejected with the closest valid name.

A run names its model as users write it, a preset and its overrides (`model: gla-100m`,
`model_overrides: {...}`: what a checkpoint stores and eval reads back); the config resolves them
once, when it is built, into the typed `TrainConfig.model_config` (a `ccq_jax.models.ModelConfig`,
its vocabulary grown to the data's where the config alone says it), which is what training reads.
A tokenizer.json's vocabulary is known when training starts: `fit_vocab` grows the model to it.
"""

import dataclasses
import math
from typing import Any, Literal

from ccq_jax import configlib
from ccq_jax.models import PRESETS, ModelConfig, get_config
from ccq_jax.tokenizers import BYTE_TOKENIZER, ByteTokenizer
from train.data.config import SYNTHETIC_SOURCES, DataConfig
from train.optim import OptimConfig
from train.sharding import MeshConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    name: str = "run"
    model: str = "gla-tiny"  # a preset of ccq_jax.models.get_config
    model_overrides: dict = dataclasses.field(default_factory=dict)  # its fields changed; `model_config` resolves
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    steps: int = 1000
    grad_accum: int = 1  # microbatches per step (the global batch is split into this many)
    seed: int = 0
    log_every: int = 10
    steps_per_call: int = 10  # train steps per device program (one host round trip each); see train.step
    eval_batches: int = 4  # held-out batches scored at the end (recall accuracy for synthetic tasks)
    checkpoint_every: int = 500  # 0: only at the end
    keep_checkpoints: int = 3
    async_checkpoint: bool = True
    on_nan: Literal["stop", "skip"] = "stop"
    # a resumed checkpoint whose files differ from their manifest: stop naming it, or resume the latest whole step
    on_damaged_checkpoint: Literal["stop", "previous"] = "stop"
    peak_tflops: float = 0.0  # per device, for MFU; 0 = the device's known peak or no MFU
    loss_chunk_len: int = 0  # positions per slice of the LM head + loss (train.loss); 0 = all at once
    # the ops' range checks (gates, lambda, counts): "eager" on concrete values only (skipped inside the jitted
    # step); "checkify" inside the step too (ccq_jax.ops.checked), a debugging run's check read after every call
    checks: Literal["eager", "checkify"] = "eager"

    def __post_init__(self):
        configlib.check_field_types(self)
        for name in ("steps", "grad_accum", "log_every", "steps_per_call"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        for name in ("eval_batches", "checkpoint_every", "keep_checkpoints", "loss_chunk_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if not 0 <= self.peak_tflops < math.inf:
            raise ValueError(f"peak_tflops: expected a finite value >= 0 (0: the device's known peak), "
                             f"got {self.peak_tflops}")
        if self.optim.warmup_steps > self.steps:
            raise ValueError(f"optim.warmup_steps: {self.optim.warmup_steps} is longer than the run (steps="
                             f"{self.steps}), which would end at the peak learning rate without decaying; expected "
                             f"optim.warmup_steps <= steps")
        if self.mesh.context > 1 and self.data.seq_len % self.mesh.context:
            raise ValueError(f"mesh.context: must divide data.seq_len={self.data.seq_len} (each device takes an "
                             f"equal part of every sequence), got {self.mesh.context}")
        if self.data.batch_size % self.grad_accum:
            raise ValueError(f"grad_accum: must divide data.batch_size={self.data.batch_size}, got {self.grad_accum}")
        object.__setattr__(self, "_model_config", self._resolve_model())

    def _resolve_model(self) -> ModelConfig:
        """The preset with its overrides, its vocabulary grown to the data's when the config says what that is;
        a bad field is a ValueError naming the `model.` key it was set with."""
        configlib.check_choice("model", self.model, PRESETS)
        try:
            model = get_config(self.model, **self.model_overrides)
        except ValueError as err:
            raise ValueError(f"model.{err}") from None
        data_vocab = known_vocab_size(self.data)
        if data_vocab is None or model.vocab_size >= data_vocab:
            return model
        if "vocab_size" in self.model_overrides:
            raise ValueError(f"model.vocab_size: {model.vocab_size} cannot hold the ids of the data "
                             f"({_vocab_owner(self.data)}: ids up to {data_vocab - 1}); expected model.vocab_size >= "
                             f"{data_vocab}, or leave it unset to grow the preset's vocabulary to the data's")
        return dataclasses.replace(model, vocab_size=data_vocab)

    @property
    def model_config(self) -> ModelConfig:
        """The typed model config, resolved once when this config was built (`model` and `model_overrides`)."""
        return self._model_config

    def to_dict(self) -> dict:
        return configlib.to_dict(self)


def fit_vocab(cfg: TrainConfig, vocab_size: int) -> ModelConfig:
    """`cfg.model_config` for data of `vocab_size` ids (a tokenizer.json's, known when training starts): its
    vocabulary grows to the data's unless `model.vocab_size` was set, which must then hold it (a ValueError)."""
    model = cfg.model_config
    if model.vocab_size >= vocab_size:
        return model
    if "vocab_size" in cfg.model_overrides:
        raise ValueError(f"model.vocab_size: {model.vocab_size} is smaller than the data's vocabulary {vocab_size}")
    return dataclasses.replace(model, vocab_size=vocab_size)


def known_vocab_size(data: DataConfig) -> int | None:
    """The vocabulary the data's ids need, where the config alone says it (a synthetic task, the byte tokenizer);
    None for a tokenizer.json (read when training starts)."""
    if data.source in SYNTHETIC_SOURCES:
        return getattr(data, data.source).vocab_size
    return ByteTokenizer.vocab_size if data.tokenizer == BYTE_TOKENIZER else None


def _vocab_owner(data: DataConfig) -> str:
    if data.source in SYNTHETIC_SOURCES:
        return f"data.{data.source}.vocab_size"
    return f"the byte tokenizer, whose BOS is {ByteTokenizer.bos_id}"


MODEL_KEYS = ("model.", "model_overrides.")  # the prefixes of `--set` keys that go to the model preset


def apply_overrides(cfg: TrainConfig, overrides: dict[str, Any]) -> TrainConfig:
    """`model.x=v` (or `model_overrides.x=v`) updates the model overrides, dotted keys of the model included
    (`model.kernel.impl=pallas`); other dotted keys are set on the config (built once, so the model config is
    resolved once)."""
    model = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(MODEL_KEYS)}
    rest = {k: v for k, v in overrides.items() if not k.startswith(MODEL_KEYS)}
    if model:
        rest["model_overrides"] = {**rest.get("model_overrides", cfg.model_overrides), **model}
    return configlib.with_overrides(cfg, rest)
