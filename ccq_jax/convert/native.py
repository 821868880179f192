"""ccq-jax's own model folder, the JAX side of `ccq-convert`: `CausalLM.save_pretrained`'s (config.json, the
native `ModelConfig.to_dict()`, + model.safetensors named by parameter path, exact), read by the one loader
`ccq_jax.models.pretrained.read_pretrained` (which also reads a ccq-train run)."""

from ccq_jax.models import CausalLM, ModelConfig
from ccq_jax.models.pretrained import read_pretrained, save_pretrained


def save_model(model: CausalLM, path, *, max_shard_bytes: int | None = None, progress: bool = False) -> None:
    """`model.save_pretrained(path)` (no tokenizer), in shards over max_shard_bytes, with a progress bar."""
    save_pretrained(model, path, max_shard_bytes=max_shard_bytes, progress=progress)


def load_model(path, *, step: int | None = None, progress: bool = False) -> tuple[ModelConfig, CausalLM]:
    """(config, model) of a folder written by `save_model` / `save_pretrained`, or of a ccq-train run (`step`:
    which saved step, default the latest)."""
    model = read_pretrained(CausalLM, path, step=step, progress=progress).model
    return model.config, model
