"""`load_fla_checkpoint` and `save_fla_checkpoint`: fla model folders <-> ccq-jax `CausalLM`s.

    config, model = load_fla_checkpoint("path/to/fla-gla")          # config.json + safetensors
    save_fla_checkpoint(model, "out/")     # fla's AutoModelForCausalLM.from_pretrained("out/") loads it

A plain GLA / Gated DeltaNet / KDA model is written as fla's `gla` / `gated_deltanet` / `kda` (fla's
`KDAForCausalLM`; a CCQ-KDA or GDN-2 model has no fla format: save those with `CausalLM.save_pretrained`); a model with a
CCQ config as `ccq_gla` / `ccq_gated_deltanet` (the CCQ reference in `ccq_jax.torch_reference`
loads those): fla's config plus a `ccq` dict (`mode`, `fixed_lambda`, `centered`,
`normalize_keys`, `gate_bias_init`) and fla's state_dict plus the gate of each layer,
`model.layers.{i}.attn.ccq.weight [H, K]` and `model.layers.{i}.attn.ccq.bias [H]` (H: the
state's heads, i.e. num_v_heads for Gated DeltaNet). Names and layouts: `ccq_jax.models.state_dict`;
config fields: `ccq_jax.convert.config`.
"""

import re
from pathlib import Path

from ccq_jax.convert.config import config_from_fla, config_to_fla
from ccq_jax.models import CausalLM, GLAConfig, ModelConfig, abstract_model, files
from ccq_jax.models.state_dict import from_state_dict, to_state_dict

# fla's GLA layer calls its gated output norm `g_norm` instead of `g_norm_swish_gate` when fuse_norm is off
_UNFUSED_GLA_NORM = re.compile(r"^(model\.layers\.\d+\.attn)\.g_norm\.weight$")


def load_fla_checkpoint(path, *, progress: bool = False, **overrides) -> tuple[ModelConfig, CausalLM]:
    """(config, model) from an fla model folder; `overrides` change config fields that keep the parameters
    (e.g. `dtype="bfloat16"`, `**{"kernel.impl": "recurrent", "kernel.chunk_size": 32}`). ValueError names what
    does not fit."""
    folder = Path(path)
    fla_config = files.read_json(folder / files.CONFIG)
    config = config_from_fla(fla_config, **overrides)
    state_dict = files.read_state_dict(folder, progress=progress)
    if isinstance(config, GLAConfig) and config.use_output_gate and fla_config.get("fuse_norm") is False:
        state_dict = {_UNFUSED_GLA_NORM.sub(r"\1.g_norm_swish_gate.weight", k): v for k, v in state_dict.items()}
    return config, from_state_dict(abstract_model(config), state_dict, progress=progress)


def save_fla_checkpoint(model: CausalLM, path, *, max_shard_bytes: int | None = None, progress: bool = False) -> None:
    """Write `model` as an fla model folder (config.json + model.safetensors, or shards over max_shard_bytes)."""
    files.write_model_folder(path, config_to_fla(model.config), to_state_dict(model, progress=progress),
                             max_shard_bytes=max_shard_bytes, progress=progress)
