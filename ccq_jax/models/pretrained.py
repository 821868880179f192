"""The one model loader and its folder: `CausalLM.save_pretrained` / `CausalLM.from_pretrained` (fla/HF's layout).

    model.save_pretrained("out/model", tokenizer=tok)      # the folder below
    model = CausalLM.from_pretrained("out/model")          # a saved folder, or a ccq-train run:
    model = CausalLM.from_pretrained("runs/x", step=200)   # its workdir, checkpoints/ folder or one step's folder

A saved folder holds
    config.json              the model's config (`ModelConfig.to_dict()`, the native format: every field)
    model.safetensors        the parameters named by their dotted paths (`layers.0.attn.q_proj.kernel`), layouts
                             unchanged, so a save and a load are exact (`ccq_jax.models.state_dict.native_rules`)
    tokenizer files          tokenizer.json (+ tokenizer_config.json), or for the byte tokenizer a
                             tokenizer_config.json naming it (`ccq_jax.tokenizers.save_tokenizer`)
    generation_config.json   bos / eos / pad token ids (HF's names)
(the tokenizer and the generation config only when a tokenizer is given). `ccq-convert export --format fla`
writes fla's config and names instead, with the same tokenizer files (`save_tokenizer_files`).

`read_pretrained(cls, path, step=...)` is the loader behind `from_pretrained`, `ccq_jax.checkpoints` (with the
tokenizer), `ccq-eval --checkpoint` and `ccq-convert`. A training checkpoint (its format: `ccq_jax.checkpoint_format`)
holds `state` (`TrainState(params, opt_state, step)`) and `config` (the TrainConfig as JSON); only the parameters
are read (an orbax partial restore, onto one device), after the step's files are checked against their manifest
(`ccq_jax.checkpoint_manifest`). The vocabulary size comes from the stored embedding (training grows a preset's
vocabulary to the data's). `overrides` change config fields that keep the parameters (`kernel.impl`, `dtype`, ...;
`param_dtype` casts on load); a run's stored `model_overrides` and a folder's config.json may hold the flat kernel
keys of before the kernel policy (`attn_impl`, ...), read as their new keys (`ccq_jax.models.config.RENAMED`).
Paths are the user's (`ccq_jax.cli.user_path`): relative ones work.
"""

import dataclasses
import pathlib
from typing import Any

import jax
from flax import nnx

from ccq_jax.checkpoint_format import checkpoint_step_dir, read_train_config, restore_params, stored_params
from ccq_jax.checkpoint_manifest import ON_DAMAGED, verified_step
from ccq_jax.cli import user_path
from ccq_jax.configlib import check_choice
from ccq_jax.models import files
from ccq_jax.models.config import ModelConfig, apply_overrides, config_from_dict, saved_overrides
from ccq_jax.models.presets import get_config
from ccq_jax.models.state_dict import from_state_dict, native_rules, to_state_dict
from ccq_jax.tokenizers import Tokenizer, save_tokenizer

GENERATION_CONFIG = "generation_config.json"


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """What `read_pretrained` read: the model, its folder (a saved folder or a checkpoint's step folder), the step
    (None for a saved folder) and the run's stored TrainConfig dict (None for a saved folder)."""

    model: nnx.Module
    path: pathlib.Path
    step: int | None
    train_config: dict[str, Any] | None


def save_tokenizer_files(folder, tokenizer: Tokenizer) -> None:
    """The tokenizer's files and generation_config.json (bos / eos / pad ids) in `folder`."""
    folder = user_path(folder)
    save_tokenizer(tokenizer, folder)
    files.write_json(folder / GENERATION_CONFIG, {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
                                                  "pad_token_id": tokenizer.pad_id})


def save_pretrained(model, folder, *, tokenizer: Tokenizer | None = None, max_shard_bytes: int | None = None,
                    progress: bool = False) -> pathlib.Path:
    """Write `model` (and `tokenizer`'s files with a generation config, when given) as a saved folder; returns it."""
    folder = user_path(folder)
    files.write_model_folder(folder, model.config.to_dict(), to_state_dict(model, rules=native_rules,
                                                                            progress=progress),
                             max_shard_bytes=max_shard_bytes, progress=progress)
    if tokenizer is not None:
        save_tokenizer_files(folder, tokenizer)
    return folder


def _shapes(tree) -> dict[str, tuple]:
    """{"layers/0/attn/q_proj/kernel/value": shape} for an nnx.State or orbax's metadata tree (plain dicts)."""
    name = lambda key: str(getattr(key, "key", getattr(key, "name", key)))
    return {"/".join(map(name, path)): tuple(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _abstract(cls, config: ModelConfig):
    return nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0)))


def _read_step(cls, path, step, overrides: dict, on_damaged_checkpoint: str) -> Pretrained:
    step_dir = checkpoint_step_dir(path, step)
    step_dir = step_dir.parent / str(verified_step(step_dir.parent, int(step_dir.name),
                                                   previous=on_damaged_checkpoint == "previous"))
    train_cfg = read_train_config(step_dir)
    saved = saved_overrides(get_config(train_cfg["model"]).family, train_cfg.get("model_overrides", {}))
    overrides = {**saved, **overrides}
    stored = stored_params(step_dir)
    if "vocab_size" not in overrides:
        overrides["vocab_size"] = stored["embeddings"]["embedding"]["value"].shape[0]
    config = get_config(train_cfg["model"], **overrides)
    graphdef, abstract_params, others = nnx.split(_abstract(cls, config), nnx.Param, ...)
    expected, found = _shapes(abstract_params), _shapes(stored)
    if expected != found:
        diff = sorted(set(expected.items()) ^ set(found.items()))
        raise ValueError(f"checkpoint: the parameters in {step_dir} do not fit model {train_cfg['model']!r} with "
                         f"overrides {overrides}; first differences (path, shape): {diff[:4]}")
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract_params)
    return Pretrained(nnx.merge(graphdef, restore_params(step_dir, target), others), step_dir, int(step_dir.name),
                      train_cfg)


def _read_folder(cls, folder: pathlib.Path, step, overrides: dict, progress: bool) -> Pretrained:
    if step is not None:
        raise ValueError(f"step: {folder} is a saved model folder (one set of weights), not a ccq-train run; "
                         f"got step={step}")
    values = files.read_json(folder / files.CONFIG)
    if "model_type" in values:
        raise ValueError(f"path: {folder} is an fla / Hugging Face model folder (its config.json has model_type "
                         f"{values['model_type']!r}); read it with ccq_jax.convert.load_fla_checkpoint, ccq-eval "
                         f"--fla-dir or `ccq-convert from-fla`")
    config = apply_overrides(config_from_dict(values), overrides)
    state_dict = files.read_state_dict(folder, progress=progress)
    return Pretrained(from_state_dict(_abstract(cls, config), state_dict, rules=native_rules, progress=progress),
                      folder, None, None)


def read_pretrained(cls, path, *, step: int | None = None, overrides: dict | None = None,
                    on_damaged_checkpoint: str = "stop", progress: bool = False) -> Pretrained:
    """`cls` (`CausalLM`) with the weights of a saved folder (one with config.json) or of a ccq-train run (its
    workdir, checkpoints/ folder or a step's folder; `step`: which saved step, default the latest).

    on_damaged_checkpoint: "stop" (a step whose files differ from its manifest raises DamagedCheckpoint) or
    "previous" (the latest earlier kept step that is whole is read instead).
    """
    check_choice("on_damaged_checkpoint", on_damaged_checkpoint, ON_DAMAGED)
    folder = user_path(path)
    if (folder / files.CONFIG).is_file():
        return _read_folder(cls, folder, step, dict(overrides or {}), progress)
    return _read_step(cls, folder, step, dict(overrides or {}), on_damaged_checkpoint)
