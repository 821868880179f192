"""Checkpoint conversion with flash-linear-attention (fla) and the parity check against PyTorch.

- `load_fla_checkpoint(path, **overrides) -> (config, model)`, `save_fla_checkpoint(model, path)`
  (`ccq_jax.convert.fla`): fla / Hugging Face model folders, no torch needed for safetensors.
- `config_from_fla`, `config_to_fla` (`ccq_jax.convert.config`): which fla fields map, which
  are required to hold a value, which are ignored.
- `ccq_jax.models.state_dict`: the parameter names and layouts (the CCQ gate of layer i is written
  as `model.layers.{i}.attn.ccq.weight [H, K]` and `model.layers.{i}.attn.ccq.bias [H]`).
- `ccq-convert` and `ccq-parity` (`ccq_jax.convert.cli`), parity metrics in `ccq_jax.convert.parity`.
"""

from ccq_jax.convert.config import config_from_fla, config_to_fla
from ccq_jax.convert.fla import load_fla_checkpoint, save_fla_checkpoint

__all__ = ["config_from_fla", "config_to_fla", "load_fla_checkpoint", "save_fla_checkpoint"]
