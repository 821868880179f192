"""Running one `ccq-eval` command: load the model the arguments name, apply `--ccq off`, run, write results.

Every command writes `<out>/<command>.json`: `{"command", "label", "ccq", "model": where the
model came from (checkpoint path and step, preset, config, tokenizer), "settings": the
command's arguments, "results": ...}` and prints its table.
"""

import argparse
import dataclasses
import pathlib
from typing import Any, Callable

from ccq_jax.checkpoints import ModelBundle, load_checkpoint, load_fla, random_model
from ccq_jax.configlib import check_choice
from ccq_jax.models import PRESETS, with_config
from eval.models import ModelRunner, TextTokenizer
from eval.records import write_json


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: `add_arguments(parser)` adds its own options; `run(ctx)` returns (results, table text)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[["Context"], tuple[dict, str]]
    settings: tuple[str, ...]  # the argument names recorded in the JSON


@dataclasses.dataclass(frozen=True)
class Context:
    args: argparse.Namespace
    model: Any
    tokenizer: TextTokenizer
    label: str
    out: pathlib.Path

    @property
    def progress(self) -> bool:
        return not self.args.no_progress

    def runner(self, *, prefix: bool = True, max_length: int = 4096) -> ModelRunner:
        """The model's adapters; prefix: every row starts with the token documents start with in training."""
        return ModelRunner(self.model, prefix=[self.tokenizer.document_start] if prefix else [],
                           batch_size=self.args.batch_size, max_length=max_length)


def load_model(args: argparse.Namespace) -> ModelBundle:
    """The model and tokenizer of --checkpoint / --preset / --fla-dir (with --step, --seed, --tokenizer, --set)."""
    if args.step is not None and args.checkpoint is None:
        raise ValueError("--step: only used with --checkpoint")
    if args.checkpoint is not None:
        return load_checkpoint(args.checkpoint, step=args.step, tokenizer=args.tokenizer, overrides=args.overrides)
    if args.fla_dir is not None:
        return load_fla(args.fla_dir, tokenizer=args.tokenizer, overrides=args.overrides)
    check_choice("--preset", args.preset, PRESETS)
    return random_model(args.preset, seed=args.seed, tokenizer=args.tokenizer or "byte", overrides=args.overrides)


def ccq_off(model):
    """The same weights with every CCQ gate off (`ccq.mode = "off"`): the layers read like their backbone."""
    if getattr(model.config, "ccq", None) is None:
        raise ValueError(f"--ccq off: the model ({model.config.family}) has no CCQ read to turn off")
    return with_config(model, **{"ccq.mode": "off"})


def default_label(bundle: ModelBundle, ccq: str) -> str:
    info = bundle.info
    name = info.get("run") or info.get("preset") or pathlib.Path(info.get("path", "model")).name
    if info["source"] == "checkpoint":
        name = f"{name}@{info['step']}"
    return f"{name} (CCQ off)" if ccq == "off" else name


def run_command(name: str, command: Command, args: argparse.Namespace) -> dict:
    """Load, run and record one command; returns the JSON record."""
    bundle = load_model(args)
    model = ccq_off(bundle.model) if args.ccq == "off" else bundle.model
    ctx = Context(args=args, model=model, tokenizer=TextTokenizer(bundle.tokenizer),
                  label=args.label or default_label(bundle, args.ccq), out=pathlib.Path(args.out))
    results, table = command.run(ctx)
    record = {"command": name, "label": ctx.label, "ccq": args.ccq, "model": bundle.info,
              "settings": {k: getattr(args, k) for k in command.settings}, "results": results}
    path = write_json(ctx.out / f"{name.replace('-', '_')}.json", record)
    print(f"{ctx.label}: {name}\n{table}\nresults: {path}")
    return record
