"""Console scripts `ccq-convert` (fla folder <-> ccq-jax folder) and `ccq-parity` (our logits vs PyTorch's).

    ccq-convert export RUN OUT_DIR [--format fla|native] [--step N]   a training run or saved folder -> a folder
                                                                     with its tokenizer and generation config
    ccq-convert from-fla FLA_DIR OUT_DIR [--set FIELD=VALUE ...]    fla / HF folder -> ccq-jax folder
    ccq-convert to-fla JAX_DIR OUT_DIR [--max-shard-gb 5]            ccq-jax folder or training run -> fla folder
    ccq-parity --checkpoint FLA_DIR [--dtype bfloat16] [--torch-python PY]
    ccq-parity --preset gla-1.3b [--dtype bfloat16] [--seq-len 512]   random init, saved, then compared

`ccq-parity` runs fla (or, for CCQ models, the PyTorch CCQ reference) in a child process of
`--torch-python` (default: this Python), on a GPU with fla's Triton kernels when torch sees one
(`--device auto`), on a CPU with fla's pure-PyTorch paths; then ours on the same token ids. It
prints max / mean |logit diff|, relative RMS, KL(fla || ours) and top-1 agreement, and with
`--json` writes them with the setup; `--max-rel-rms` makes it exit 1 above a bound.
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from ccq_jax import configlib
from ccq_jax.cli import add_debug_flag, run_or_exit


def _overrides(parser, items):
    try:
        return configlib.parse_overrides(items)
    except ValueError as err:
        parser.error(str(err))


def _convert(args, overrides) -> int:
    from ccq_jax.checkpoints import load_checkpoint
    from ccq_jax.convert import fla, native
    from ccq_jax.models.pretrained import save_pretrained, save_tokenizer_files

    shard = None if args.max_shard_gb is None else int(args.max_shard_gb * 2**30)
    if args.direction == "from-fla":
        config, model = fla.load_fla_checkpoint(args.source, progress=True, **overrides)
        native.save_model(model, args.target, max_shard_bytes=shard, progress=True)
    elif args.direction == "to-fla":
        config, model = native.load_model(args.source, progress=True)
        fla.save_fla_checkpoint(model, args.target, max_shard_bytes=shard, progress=True)
    else:
        bundle = load_checkpoint(args.source, step=args.step, tokenizer=args.tokenizer)
        config = bundle.model.config
        if args.format == "fla":
            fla.save_fla_checkpoint(bundle.model, args.target, max_shard_bytes=shard, progress=True)
            save_tokenizer_files(args.target, bundle.tokenizer)
        else:
            save_pretrained(bundle.model, args.target, tokenizer=bundle.tokenizer, max_shard_bytes=shard,
                            progress=True)
    print(f"wrote {args.target} ({config.family}, {config.num_hidden_layers} layers, width {config.hidden_size})")
    return 0


def convert_main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ccq-convert", description=__doc__.splitlines()[0])
    add_debug_flag(parser)
    sub = parser.add_subparsers(dest="direction", required=True)
    export = sub.add_parser("export", help="a training run (workdir) or a saved folder -> a model folder with its "
                                           "tokenizer and generation_config.json")
    from_fla = sub.add_parser("from-fla", help="an fla / Hugging Face model folder -> a ccq-jax model folder")
    to_fla = sub.add_parser("to-fla", help="a ccq-jax model folder or a training run -> an fla model folder")
    for p in (export, from_fla, to_fla):
        p.add_argument("source")
        p.add_argument("target")
    from_fla.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                          help="override a config field of the result, e.g. --set kernel.chunk_size=32")
    export.add_argument("--format", choices=("fla", "native"), default="fla",
                        help="fla: fla's config and names (fla's AutoModelForCausalLM loads it); native: "
                             "CausalLM.save_pretrained's (exact, every config field)")
    export.add_argument("--step", type=int, default=None, help="which saved step of a run (default: the latest)")
    export.add_argument("--tokenizer", default=None,
                        help="'byte' or a tokenizer.json instead of the run's (or the folder's) own")
    for p in (export, from_fla, to_fla):
        p.add_argument("--max-shard-gb", type=float, default=None, help="write shards of at most this size")
    args = parser.parse_args(argv)
    overrides = _overrides(parser, args.overrides) if args.direction == "from-fla" else {}
    return run_or_exit(parser, lambda: _convert(args, overrides), args.debug)


def _parity_parser():
    parser = argparse.ArgumentParser(prog="ccq-parity", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="an fla model folder (or one written by save_fla_checkpoint)")
    source.add_argument("--preset", help="a ccq-jax preset, randomly initialised (--seed), saved in fla's format")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="parameters and compute on both sides")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0, help="token ids (and --preset weights)")
    parser.add_argument("--device", default="auto", help="the PyTorch side: auto (cuda if available), cpu, cuda")
    parser.add_argument("--tf32", action="store_true",
                        help="let fp32 matmuls on a GPU use TF32 on both sides (off: fp32 means IEEE fp32)")
    parser.add_argument("--torch-python", default=None, help="Python with torch and fla (default: this one)")
    parser.add_argument("--save-dir", default=None, help="where --preset writes its checkpoint (default: a temp dir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override our config (e.g. --set kernel.impl=recurrent; with --preset also sizes)")
    parser.add_argument("--json", default=None, help="write the metrics and the setup to this file")
    parser.add_argument("--max-rel-rms", type=float, default=None, help="exit 1 if the relative RMS is above")
    return parser


def _run_parity(args, overrides, checkpoint) -> dict:
    import jax
    import numpy as np
    from flax import nnx

    from ccq_jax.convert import fla, parity
    from ccq_jax.models import CausalLM, count_params, get_config, with_dtype

    dtypes = dict(dtype=args.dtype, param_dtype=args.dtype)
    if args.preset:
        config = get_config(args.preset, **{**dtypes, **overrides})
        model = CausalLM(config, rngs=nnx.Rngs(args.seed))
        fla.save_fla_checkpoint(model, checkpoint, progress=True)
    else:
        config, model = fla.load_fla_checkpoint(checkpoint, progress=True, **{**dtypes, **overrides})
    ids = np.random.default_rng(args.seed).integers(0, config.vocab_size, (args.batch, args.seq_len))
    start = time.perf_counter()
    reference, torch_side = parity.torch_logits(checkpoint, ids, python=args.torch_python, device=args.device,
                                                dtype=args.dtype, tf32=args.tf32)
    torch_seconds = time.perf_counter() - start
    start = time.perf_counter()
    logits = lambda m: np.asarray(nnx.jit(lambda m, x: m(x))(m, jax.numpy.asarray(ids, jax.numpy.int32)))
    with jax.default_matmul_precision(parity.matmul_precision(args.dtype, args.tf32)):
        ours = logits(model)
    jax_seconds = time.perf_counter() - start
    extra = {}
    if args.dtype != "float32":  # what half precision costs each side: both against our fp32 logits, same weights
        with jax.default_matmul_precision(parity.matmul_precision("float32", args.tf32)):
            fp32 = logits(with_dtype(model, "float32"))
        extra["against_our_fp32"] = {"ours": parity.logit_metrics(ours, fp32),
                                     "torch": parity.logit_metrics(reference, fp32)}
    return {
        "source": args.checkpoint or f"preset {args.preset} (random init, seed {args.seed})",
        "model": {"family": config.family, "ccq": config.ccq is not None, "layers": config.num_hidden_layers,
                  "hidden_size": config.hidden_size, "parameters": count_params(config)},
        "tokens": [args.batch, args.seq_len], "dtype": args.dtype,
        "torch_side": {**torch_side, "seconds": round(torch_seconds, 2)},
        "jax_side": {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
                     "kernel_impl": config.kernel.impl, "seconds": round(jax_seconds, 2)},
        "host": platform.node(),
        "tf32": args.tf32,
        "metrics": parity.logit_metrics(ours, reference),
        **extra,
    }


def parity_main(argv=None) -> None:
    parser = _parity_parser()
    args = parser.parse_args(argv)
    if args.checkpoint and args.save_dir:
        parser.error("--save-dir goes with --preset (a --checkpoint is compared where it is)")
    overrides = _overrides(parser, args.overrides)
    # JAX must not take most of a GPU's memory up front: the PyTorch side runs on it too
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or args.save_dir or tmp
        try:
            record = _run_parity(args, overrides, checkpoint)
        except (ValueError, RuntimeError) as err:
            sys.exit(f"ccq-parity: {err}")
    model, torch_side, jax_side, m = record["model"], record["torch_side"], record["jax_side"], record["metrics"]
    print(f"{record['source']}: {'ccq-' if model['ccq'] else ''}{model['family']}, {model['layers']} layers, width "
          f"{model['hidden_size']}, {model['parameters']:,} parameters; {args.batch} x {args.seq_len} tokens, "
          f"{args.dtype}")
    print(f"  PyTorch (torch {torch_side['torch']}, fla {torch_side['fla']}) on {torch_side['device']}: "
          f"{torch_side['seconds']} s; JAX {jax_side['jax']} on {jax_side['device']} ({jax_side['kernel_impl']}): "
          f"{jax_side['seconds']} s")
    for label, key in (("max |logit diff|", "max_abs_diff"), ("mean |logit diff|", "mean_abs_diff"),
                       ("relative RMS", "rel_rms"), ("KL(fla || ours) per token", "kl")):
        print(f"  {label:<28} {m[key]:.3e}")
    print(f"  {'top-1 agreement':<28} {m['top1_agreement']:.4%}")
    for side, against in record.get("against_our_fp32", {}).items():
        print(f"  {side} {args.dtype} vs our fp32 logits: relative RMS {against['rel_rms']:.3e}, "
              f"top-1 {against['top1_agreement']:.2%}")
    if args.json:
        command = ["ccq-parity", *(sys.argv[1:] if argv is None else argv)]
        Path(args.json).write_text(json.dumps({"command": " ".join(command), **record}, indent=2) + "\n")
    if args.max_rel_rms is not None and m["rel_rms"] > args.max_rel_rms:
        sys.exit(f"ccq-parity: relative RMS {m['rel_rms']:.3e} is above --max-rel-rms {args.max_rel_rms}")
