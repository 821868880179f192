"""A model and its tokenizer from a saved folder or a training run, a preset (random init) or an fla folder.

    bundle = load_checkpoint("runs/demo")               # a ccq-train workdir, its checkpoints/ or a step's folder,
    bundle = load_checkpoint("out/model")               # or a folder of CausalLM.save_pretrained / ccq-convert export
    model, step_dir, train_cfg = load_checkpoint_model("runs/demo/gla-tiny-seed0")  # parameters only, no tokenizer
    bundle = random_model("ccq-gla-tiny", seed=0)       # random initialisation, for smoke tests
    bundle = load_fla("path/to/fla-model")              # needs ccq_jax.convert (fla conversion)
    bundle.model, bundle.tokenizer, bundle.info         # CausalLM, ccq_jax.tokenizers tokenizer, a JSON-able dict

The model is read by `ccq_jax.models.pretrained.read_pretrained`, the loader behind `CausalLM.from_pretrained`
(what a run's checkpoint holds, the manifest check, `overrides`: see there). The tokenizer is the saved folder's,
or the one the run's data config names. A damaged step raises `DamagedCheckpoint` naming the step, the file and
the previous kept step; `on_damaged_checkpoint="previous"` takes the latest whole earlier step instead.
`checkpoint_step_dir` and `read_train_config` (a run's step folder and stored TrainConfig, readers of
`ccq_jax.checkpoint_format`, the format a training run writes) are re-exported here.
"""

import dataclasses
from typing import Any

from flax import nnx

from ccq_jax.checkpoint_format import checkpoint_step_dir, read_train_config
from ccq_jax.cli import user_path
from ccq_jax.models import CausalLM, get_config, with_config
from ccq_jax.models.pretrained import Pretrained, read_pretrained
from ccq_jax.tokenizers import BYTE_TOKENIZER, Tokenizer, has_tokenizer, load_tokenizer

__all__ = ["ModelBundle", "checkpoint_step_dir", "load_checkpoint", "load_checkpoint_model", "load_fla",
           "random_model", "read_train_config"]


@dataclasses.dataclass(frozen=True)
class ModelBundle:
    """A model, the tokenizer it reads, and where both came from (`info`: JSON-able)."""

    model: CausalLM
    tokenizer: Tokenizer
    info: dict[str, Any]


def _check_vocab(model: CausalLM, tokenizer: Tokenizer, hint: str = "") -> None:
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"tokenizer: it has {tokenizer.vocab_size} ids but the model's vocabulary has "
                         f"{model.config.vocab_size}{hint}; pass the tokenizer the model was trained with")


def _tokenizer_from_data(data: dict) -> Tokenizer:
    return load_tokenizer(data.get("tokenizer", BYTE_TOKENIZER), bos_token=data.get("bos_token"),
                          eos_token=data.get("eos_token"))


def load_checkpoint_model(path, *, step: int | None = None, overrides: dict | None = None,
                          on_damaged_checkpoint: str = "stop"):
    """(model, its folder, the run's stored TrainConfig dict or None for a saved folder): the parameters alone, no
    tokenizer (a run on synthetic data, MQAR say, has none that fits its vocabulary).

    on_damaged_checkpoint: "stop" (a step whose files differ from its manifest raises DamagedCheckpoint) or
    "previous" (then the latest earlier kept step that is whole is loaded).
    """
    read = read_pretrained(CausalLM, path, step=step, overrides=overrides,
                           on_damaged_checkpoint=on_damaged_checkpoint)
    return read.model, read.path, read.train_config


def _folder_tokenizer(folder, tokenizer: str | None) -> Tokenizer:
    """`tokenizer` when named, else the one saved in `folder` (a ValueError when it holds none)."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if not has_tokenizer(folder):
        raise ValueError(f"tokenizer: {folder} has no tokenizer.json (nor a saved tokenizer); name one (a "
                         f"tokenizer.json path or 'byte')")
    return load_tokenizer(str(folder))


def _bundle_tokenizer(read: Pretrained, tokenizer: str | None) -> Tokenizer:
    if read.train_config is not None and tokenizer is None:
        return _tokenizer_from_data(read.train_config.get("data", {}))
    return _folder_tokenizer(read.path, tokenizer)


def load_checkpoint(path, *, step: int | None = None, tokenizer: str | None = None,
                    overrides: dict | None = None, on_damaged_checkpoint: str = "stop") -> ModelBundle:
    """The model of a saved folder or a ccq-train checkpoint (parameters only) and its tokenizer (the folder's, or
    the one the run's data config names).

    tokenizer: "byte", a tokenizer.json path or a saved folder instead (e.g. after moving files).
    on_damaged_checkpoint: "stop" or "previous", as in `load_checkpoint_model`.
    """
    read = read_pretrained(CausalLM, path, step=step, overrides=overrides,
                           on_damaged_checkpoint=on_damaged_checkpoint)
    tok = _bundle_tokenizer(read, tokenizer)
    config = read.model.config.to_dict()
    if read.train_config is None:
        _check_vocab(read.model, tok)
        return ModelBundle(read.model, tok, {"source": "saved", "path": str(read.path), "config": config,
                                             "tokenizer": tok.spec})
    data = read.train_config.get("data", {})
    _check_vocab(read.model, tok, f" (the run trained on {data.get('source')!r} data)")
    info = {"source": "checkpoint", "path": str(read.path), "step": read.step, "preset": read.train_config["model"],
            "run": read.train_config.get("name"), "config": config, "tokenizer": tok.spec}
    return ModelBundle(read.model, tok, info)


def random_model(preset: str, *, seed: int = 0, tokenizer: str = BYTE_TOKENIZER,
                 overrides: dict | None = None) -> ModelBundle:
    """A randomly initialised preset; its vocabulary grows to the tokenizer's (as training does) unless overridden."""
    tok = load_tokenizer(tokenizer)
    overrides = dict(overrides or {})
    if "vocab_size" not in overrides:
        overrides["vocab_size"] = max(get_config(preset, **overrides).vocab_size, tok.vocab_size)
    config = get_config(preset, **overrides)
    model = CausalLM(config, rngs=nnx.Rngs(seed))
    _check_vocab(model, tok)
    info = {"source": "preset", "preset": preset, "seed": seed, "config": config.to_dict(), "tokenizer": tok.spec}
    return ModelBundle(model, tok, info)


def load_fla(path, *, tokenizer: str | None = None, overrides: dict | None = None) -> ModelBundle:
    """A model folder converted from fla (`ccq_jax.convert.load_fla_checkpoint(path) -> (config, model)`).

    The tokenizer defaults to the folder's (a tokenizer.json, or the files `ccq-convert export` writes).
    """
    try:  # the fla conversion is optional here (test_fla_hook): its absence is a ValueError naming it
        from ccq_jax.convert import load_fla_checkpoint
    except ImportError as e:
        raise ValueError(f"fla_dir: reading an fla model folder needs ccq_jax.convert.load_fla_checkpoint "
                         f"(the fla conversion), which this installation cannot import: {e}") from e
    path = user_path(path)
    _, model = load_fla_checkpoint(path)
    if overrides:
        model = with_config(model, **overrides)
    tok = _folder_tokenizer(path, tokenizer)
    _check_vocab(model, tok)
    info = {"source": "fla", "path": str(path), "config": model.config.to_dict(), "tokenizer": tok.spec}
    return ModelBundle(model, tok, info)
