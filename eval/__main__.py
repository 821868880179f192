"""`ccq-eval` (also `python -m eval`): evaluate a trained checkpoint, a preset or a converted fla model.

    ccq-eval ppl           --checkpoint runs/x --data wiki.test.jsonl --window 2048 --stride 1024
    ccq-eval extrapolation --checkpoint runs/x --data long_docs/ --lengths 1024,2048,4096,8192
    ccq-eval niah          --checkpoint runs/x --lengths 1024,2048,4096 --depths 0,25,50,75,100
    ccq-eval lm-eval       --checkpoint runs/x --tasks my_lambada --include-path my_tasks/
    ccq-eval longbench     --checkpoint runs/x --data-dir LongBench/data --config-dir LongBench/config
    ccq-eval delta-mu      --checkpoint runs/x --length 2048 --num-prompts 8

The model: `--checkpoint DIR` (a ccq-train workdir, its checkpoints/ folder or one step's
folder; `--step N`), `--preset NAME` (random initialisation, `--seed`), or `--fla-dir DIR` (a
model folder converted from fla). `--ccq off` runs the same evaluation with every CCQ gate
forced off on the same weights (the paper's inference-time ablation); `--set FIELD=VALUE`
changes other model fields that keep the weights (e.g. `kernel.impl=recurrent`). Results go to
`--out` (default `eval_out/`) as `<command>.json` (+ PNGs and per-sample JSONL); a summary
table is printed. A user error ends with one `ccq-eval: error: ...` line and exit status 2
(`--debug`: its traceback instead). Compiled programs are cached in ~/.cache/ccq-jax/xla
($XDG_CACHE_HOME/ccq-jax/xla); CCQ_JAX_COMPILATION_CACHE=off turns that off, =DIR moves it.
"""

import argparse
import sys

from ccq_jax import checks as check
from ccq_jax.cli import add_debug_flag, run_or_exit, use_compilation_cache
from ccq_jax.configlib import parse_overrides
from eval.commands import COMMANDS
from eval.runs import run_command


def _common(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    source = model.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", metavar="DIR",
                        help="a ccq-train workdir, its checkpoints/, a step folder or a saved model folder")
    source.add_argument("--preset", metavar="NAME", help="a model preset with random weights (smoke tests)")
    source.add_argument("--fla-dir", metavar="DIR", help="a model folder converted from fla (ccq_jax.convert)")
    model.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    model.add_argument("--seed", type=int, default=0, help="initialisation seed for --preset")
    model.add_argument("--tokenizer", default=None,
                       help="'byte' or a tokenizer.json (default: the checkpoint's, the fla folder's, or byte)")
    model.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a model config field that keeps the weights, e.g. kernel.impl=recurrent")
    model.add_argument("--ccq", choices=("on", "off"), default="on",
                       help="off: force every CCQ gate off on the same weights (inference-time ablation)")
    model.add_argument("--label", default=None, help="the model's name in results and plots")
    run = parser.add_argument_group("run")
    run.add_argument("--out", default="eval_out", help="folder for JSON results, PNGs and records")
    run.add_argument("--batch-size", type=int, default=8, help="rows per compiled call")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_debug_flag(run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ccq-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(p)
        _common(p)
    return parser


def _run(args: argparse.Namespace) -> int:
    args.overrides = parse_overrides(args.overrides)
    check.integer("--batch-size", args.batch_size, minimum=1)
    run_command(args.command, COMMANDS[args.command], args)
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    use_compilation_cache()
    return run_or_exit(parser, lambda: _run(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
