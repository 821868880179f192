"""ccq-jax's own model folder: `config.json` (`ModelConfig.to_dict()`) + `params.safetensors`.

Tensors are named by their parameter paths in ccq-jax's layouts (`layers.0.attn.q_proj.kernel`
[in, out], ...), so saving and loading are exact. `ccq-convert` reads and writes this format on
the JAX side of a conversion.
"""

from pathlib import Path

from safetensors.numpy import save_file

from ccq_jax.convert import files
from ccq_jax.convert.params import from_state_dict, native_rules, to_state_dict
from ccq_jax.models import CausalLM, ModelConfig, config_from_dict

PARAMS = "params.safetensors"


def save_model(model: CausalLM, path, *, progress: bool = False) -> None:
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    files.write_json(folder / files.CONFIG, model.config.to_dict())
    save_file(to_state_dict(model, rules=native_rules, progress=progress), folder / PARAMS,
              metadata={"format": "ccq-jax"})


def load_model(path, *, progress: bool = False) -> tuple[ModelConfig, CausalLM]:
    """(config, model) of a folder written by `save_model`."""
    folder = Path(path)
    config = config_from_dict(files.read_json(folder / files.CONFIG))
    state_dict = files.read_safetensors(folder / PARAMS)
    return config, from_state_dict(config, state_dict, rules=native_rules, progress=progress)
