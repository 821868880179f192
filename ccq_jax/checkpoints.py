"""A model and its tokenizer from a training checkpoint (parameters only), a preset (random init) or an fla folder.

    bundle = load_checkpoint("runs/demo")               # a ccq-train workdir, its checkpoints/ or one step's folder
    model, step_dir, train_cfg = load_checkpoint_model("runs/demo/gla-tiny-seed0")  # parameters only, no tokenizer
    bundle = random_model("ccq-gla-tiny", seed=0)       # random initialisation, for smoke tests
    bundle = load_fla("path/to/fla-model")              # needs ccq_jax.convert (fla conversion)
    bundle.model, bundle.tokenizer, bundle.info         # CausalLM, ccq_jax.tokenizers tokenizer, a JSON-able dict

A training checkpoint (written by `train/checkpoint.py`) holds the items `state`
(`TrainState(params, opt_state, step)`) and `config` (the TrainConfig as JSON: the `model`
preset, `model_overrides`, and the data config naming the tokenizer). Only the parameters
are read (an orbax partial restore, onto one device); the optimizer state stays on disk.
The vocabulary size comes from the stored embedding, because training grows a preset's
vocabulary to the data's. `overrides` change config fields that keep the parameters (e.g.
`attn_impl`, `chunk_size`, `dtype`; `param_dtype` casts on restore).

A step is checked against the manifest of checksums saved with it before it is read
(`ccq_jax.checkpoint_manifest`): a damaged file raises `DamagedCheckpoint` naming the step, the
file and the previous kept step; `on_damaged_checkpoint="previous"` takes the latest whole
earlier step instead. A step saved before manifests existed is loaded unchecked.
"""

import dataclasses
import logging
import pathlib
from contextlib import contextmanager
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx

from ccq_jax.checkpoint_manifest import ON_DAMAGED, verified_step
from ccq_jax.cli import user_path
from ccq_jax.configlib import check_choice
from ccq_jax.models import CausalLM, abstract_model, get_config, with_config
from ccq_jax.tokenizers import BYTE_TOKENIZER, HFTokenizer, Tokenizer, load_tokenizer


@dataclasses.dataclass(frozen=True)
class ModelBundle:
    """A model, the tokenizer it reads, and where both came from (`info`: JSON-able)."""

    model: CausalLM
    tokenizer: Tokenizer
    info: dict[str, Any]


@contextmanager
def _quiet_orbax():
    """Orbax logs warnings through absl for a read-only restore of one item (missing manager metadata)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _is_step_dir(path: pathlib.Path) -> bool:
    return (path / "state").is_dir() and (path / "config").is_dir()


def checkpoint_step_dir(path, step: int | None = None) -> pathlib.Path:
    """The folder of one saved step: `path` is a ccq-train workdir, its `checkpoints/` folder or a step's folder.

    step: which saved step (default: the latest); not allowed when `path` is a step's folder.
    A relative path (or one with `~`) is made absolute here: orbax reads no metadata from a relative one.
    """
    path = user_path(path)
    if _is_step_dir(path):
        if step is not None and path.name != str(step):
            raise ValueError(f"step: {path} is the folder of step {path.name}; got step={step}")
        return path
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    steps = ocp.utils.checkpoint_steps(root) if root.is_dir() else []
    if not steps:
        raise ValueError(f"checkpoint: {path} is not a ccq-train workdir, checkpoints folder or step folder "
                         f"(no saved step found in {root})")
    if step is None:
        step = max(steps)
    elif step not in steps:
        raise ValueError(f"step: {step} is not saved in {root}; saved steps: {sorted(steps)}")
    return root / str(step)


def read_train_config(step_dir) -> dict:
    """The TrainConfig dict stored with a checkpoint."""
    with _quiet_orbax():
        return ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(user_path(step_dir) / "config")


def _shapes(tree) -> dict[str, tuple]:
    """{"layers/0/attn/q_proj/kernel/value": shape} for an nnx.State or orbax's metadata tree (plain dicts)."""
    name = lambda key: str(getattr(key, "key", getattr(key, "name", key)))
    return {"/".join(map(name, path)): tuple(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _check_vocab(model: CausalLM, tokenizer: Tokenizer, hint: str = "") -> None:
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"tokenizer: it has {tokenizer.vocab_size} ids but the model's vocabulary has "
                         f"{model.config.vocab_size}{hint}; pass the tokenizer the model was trained with")


def _tokenizer_from_data(data: dict, tokenizer: str | None) -> Tokenizer:
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    return load_tokenizer(data.get("tokenizer", BYTE_TOKENIZER), bos_token=data.get("bos_token"),
                          eos_token=data.get("eos_token"))


def load_checkpoint_model(path, *, step: int | None = None, overrides: dict | None = None,
                          on_damaged_checkpoint: str = "stop"):
    """(model, step folder, stored TrainConfig dict) of a ccq-train checkpoint: the parameters alone, no tokenizer
    (a run on synthetic data, MQAR say, has none that fits its vocabulary).

    on_damaged_checkpoint: "stop" (a step whose files differ from its manifest raises DamagedCheckpoint) or
    "previous" (then the latest earlier kept step that is whole is loaded).
    """
    check_choice("on_damaged_checkpoint", on_damaged_checkpoint, ON_DAMAGED)
    step_dir = checkpoint_step_dir(path, step)
    step_dir = step_dir.parent / str(verified_step(step_dir.parent, int(step_dir.name),
                                                   previous=on_damaged_checkpoint == "previous"))
    train_cfg = read_train_config(step_dir)
    overrides = {**train_cfg.get("model_overrides", {}), **(overrides or {})}
    with _quiet_orbax():
        stored = ocp.PyTreeCheckpointer().metadata(step_dir / "state").item_metadata.tree["params"]
    if "vocab_size" not in overrides:
        overrides["vocab_size"] = stored["embeddings"]["embedding"]["value"].shape[0]
    config = get_config(train_cfg["model"], **overrides)
    graphdef, abstract_params, others = nnx.split(abstract_model(config), nnx.Param, ...)
    expected, found = _shapes(abstract_params), _shapes(stored)
    if expected != found:
        diff = sorted(set(expected.items()) ^ set(found.items()))
        raise ValueError(f"checkpoint: the parameters in {step_dir} do not fit model {train_cfg['model']!r} with "
                         f"overrides {overrides}; first differences (path, shape): {diff[:4]}")
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = {"params": jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                                     abstract_params)}
    with _quiet_orbax():
        restored = ocp.PyTreeCheckpointer().restore(step_dir / "state", args=ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True))
    return nnx.merge(graphdef, restored["params"], others), step_dir, train_cfg


def load_checkpoint(path, *, step: int | None = None, tokenizer: str | None = None,
                    overrides: dict | None = None, on_damaged_checkpoint: str = "stop") -> ModelBundle:
    """The model of a ccq-train checkpoint (parameters only) and the tokenizer its data config names.

    tokenizer: "byte" or a tokenizer.json path instead of the stored one (e.g. after moving files).
    on_damaged_checkpoint: "stop" or "previous", as in `load_checkpoint_model`.
    """
    model, step_dir, train_cfg = load_checkpoint_model(path, step=step, overrides=overrides,
                                                       on_damaged_checkpoint=on_damaged_checkpoint)
    data = train_cfg.get("data", {})
    tok = _tokenizer_from_data(data, tokenizer)
    _check_vocab(model, tok, f" (the run trained on {data.get('source')!r} data)")
    info = {"source": "checkpoint", "path": str(step_dir), "step": int(step_dir.name), "preset": train_cfg["model"],
            "run": train_cfg.get("name"), "config": model.config.to_dict(), "tokenizer": tok.spec}
    return ModelBundle(model, tok, info)


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

    The tokenizer defaults to the folder's `tokenizer.json`.
    """
    try:
        from ccq_jax.convert import load_fla_checkpoint
    except ImportError as e:
        raise ValueError(f"fla_dir: reading an fla model folder needs ccq_jax.convert.load_fla_checkpoint "
                         f"(the fla conversion), which this installation cannot import: {e}") from e
    path = user_path(path)
    _, model = load_fla_checkpoint(path)
    if overrides:
        model = with_config(model, **overrides)
    if tokenizer is None and not (path / "tokenizer.json").is_file():
        raise ValueError(f"tokenizer: {path} has no tokenizer.json; name one (a tokenizer.json path or 'byte')")
    tok = load_tokenizer(tokenizer) if tokenizer is not None else HFTokenizer(str(path / "tokenizer.json"))
    _check_vocab(model, tok)
    info = {"source": "fla", "path": str(path), "config": model.config.to_dict(), "tokenizer": tok.spec}
    return ModelBundle(model, tok, info)
