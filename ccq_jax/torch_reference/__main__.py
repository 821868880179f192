"""`python ccq_jax/torch_reference init|logits ...`: the PyTorch half of parity, in its own process.

    init   --config CONFIG.json --out DIR [--seed 0] [--perturb 0.0]   a random fla / CCQ reference checkpoint
    logits --checkpoint DIR --ids IDS.npy --out LOGITS.npy [--device auto|cpu|cuda] [--dtype float32|bfloat16]
           (prints one JSON line: the device used, torch and fla versions)
    layer  --kind CLASS --config CONFIG.json --out DIR [--seed 0] [--perturb 0.0]   an fla layer's state_dict, x, y

Run by path (as above) it imports only torch, fla and this package, not `ccq_jax/__init__.py`
(which needs JAX), so it works from a Python that has torch and fla but no JAX.
"""

import sys
import types
from pathlib import Path

if not __package__:  # run by path: make `ccq_jax` a bare namespace so its JAX-importing __init__ is skipped
    _package = types.ModuleType("ccq_jax")
    _package.__path__ = [str(Path(__file__).resolve().parents[1])]
    sys.modules.setdefault("ccq_jax", _package)

import argparse  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402

from ccq_jax.torch_reference import run  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python ccq_jax/torch_reference", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write a randomly initialised checkpoint")
    init.add_argument("--config", required=True, help="JSON file: an fla config dict with its model_type")
    init.add_argument("--out", required=True)
    init.add_argument("--seed", type=int, default=0)
    init.add_argument("--perturb", type=float, default=0.0, help="add perturb * N(0, 1) to every parameter")
    logits = sub.add_parser("logits", help="fp32 logits of a checkpoint on token ids")
    logits.add_argument("--checkpoint", required=True)
    logits.add_argument("--ids", required=True, help=".npy file of int token ids [B, T]")
    logits.add_argument("--out", required=True, help=".npy file for the logits [B, T, vocab] (fp32)")
    logits.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    logits.add_argument("--dtype", default="float32", choices=sorted(run.DTYPES))
    logits.add_argument("--tf32", action="store_true", help="let torch's fp32 matmuls on a GPU use TF32")
    layer = sub.add_parser("layer", help="an fla mixer layer's state_dict, an input and its output (CPU, fp32)")
    layer.add_argument("--kind", required=True, help="its class in fla.layers, e.g. GatedDeltaNet2")
    layer.add_argument("--config", required=True, help="JSON file: the layer's keyword arguments")
    layer.add_argument("--out", required=True)
    layer.add_argument("--seed", type=int, default=0)
    layer.add_argument("--perturb", type=float, default=0.0, help="add perturb * N(0, 1) to every parameter")
    args = parser.parse_args(argv)
    if args.command == "layer":
        run.layer_outputs(args.kind, json.loads(Path(args.config).read_text()), args.seed, args.out, args.perturb)
        print(json.dumps(run.versions()))
    elif args.command == "init":
        run.init_checkpoint(json.loads(Path(args.config).read_text()), args.seed, args.out, args.perturb)
    else:
        device = run.resolve_device(args.device)
        np.save(args.out, run.checkpoint_logits(args.checkpoint, np.load(args.ids), device, args.dtype,
                                                tf32=args.tf32))
        print(json.dumps({"device": device, "dtype": args.dtype, **run.versions()}))


if __name__ == "__main__":
    main()
