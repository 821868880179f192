"""Regenerate the parity goldens in tests/fixtures/fla/: tiny fla and CCQ-reference models with PyTorch's logits.

    python scripts/make_fla_goldens.py --torch-python /path/to/torch-venv/bin/python [--out tests/fixtures/fla]

Run it with ccq-jax's Python (JAX); `--torch-python` is a Python with torch, transformers and
fla-core / flash-linear-attention 0.6.0 (Python 3.11 with the CPU torch wheel is enough: the
PyTorch side runs in its own process and needs no JAX). Each case folder holds what CI compares
without torch: `config.json` + `model.safetensors` (an fla model folder), `input_ids.npy` [2, 40],
`logits.npy` (PyTorch's fp32 logits, on a CPU with fla's pure-PyTorch paths) and `golden.json`
(how it was made, versions, and our relative RMS at generation time).

Layer cases (`LAYER_CASES`: fla's GDN-2 has a layer but no model) hold instead the layer's `config.json` (its class
in `fla.layers` and keyword arguments), `layer.safetensors` (its state_dict), `x.npy` [2, 40, 32] and fla's `y.npy`.

Two kinds of case: "fla" models are built and randomly initialised by fla's own code (then
every parameter perturbed by 0.05 N(0, 1), so norms and biases are not at their special initial
values); "ccq-jax" models are ours, with random parameters, written by `save_fla_checkpoint`
and run by fla / the CCQ reference, which checks the way back.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccq_jax.convert import load_fla_checkpoint, save_fla_checkpoint  # noqa: E402
from ccq_jax.models.files import write_json  # noqa: E402
from ccq_jax.convert.parity import logit_metrics, run_torch_side, torch_logits  # noqa: E402
from ccq_jax.models import CausalLM, get_config  # noqa: E402

BATCH, LENGTH, SEED = 2, 40, 0
SMALL = dict(vocab_size=48, hidden_size=32, num_hidden_layers=2, intermediate_size=64)
PERTURB = 0.05
LAYER_PERTURB = 0.2  # a layer alone: larger, so that the gates and norms are well off their initial values
CCQ_FIXED = dict(mode="fixed", fixed_lambda=0.5, centered=False, normalize_keys=False, gate_bias_init=-2.0)

# name: ("fla", fla config dict) or ("ccq-jax", (preset, overrides))
CASES = {
    "gla": ("fla", dict(model_type="gla", num_heads=2, initializer_range=0.1, **SMALL)),
    "gla-mqa-conv": ("fla", dict(model_type="gla", num_heads=2, num_kv_heads=1, expand_k=1.0, expand_v=0.5,
                                 use_short_conv=True, conv_size=3, clamp_min=-0.04, use_output_gate=False,
                                 tie_word_embeddings=True, initializer_range=0.1, **SMALL)),
    "gdn": ("fla", dict(model_type="gated_deltanet", num_heads=2, head_dim=8, initializer_range=0.1, **SMALL)),
    "gdn-gva": ("fla", dict(model_type="gated_deltanet", num_heads=2, head_dim=8, num_v_heads=4, conv_size=2,
                            allow_neg_eigval=True, use_gate=False, tie_word_embeddings=True, initializer_range=0.1,
                            **SMALL)),
    "ccq-gla-fixed": ("fla", dict(model_type="ccq_gla", num_heads=2, ccq=CCQ_FIXED, initializer_range=0.1,
                                  **SMALL)),
    "gla-from-jax": ("ccq-jax", ("gla-tiny", dict(num_heads=2, **SMALL))),
    "gdn-from-jax": ("ccq-jax", ("gdn-tiny", dict(num_heads=2, head_dim=8, **SMALL))),
    "ccq-gla": ("ccq-jax", ("ccq-gla-tiny", dict(num_heads=2, num_kv_heads=1, use_short_conv=True, **SMALL))),
    "ccq-gdn": ("ccq-jax", ("ccq-gdn-tiny", dict(num_heads=2, head_dim=8, num_v_heads=4, **SMALL))),
    "kda-gva": ("fla", dict(model_type="kda", num_heads=2, head_dim=8, num_v_heads=4, allow_neg_eigval=True,
                            initializer_range=0.1, **SMALL)),
    "gla-hybrid": ("fla", dict(model_type="gla", num_heads=2, initializer_range=0.1, **SMALL,
                               attn={"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True})),
    "gdn-hybrid-window": ("fla", dict(model_type="gated_deltanet", num_heads=2, head_dim=8, initializer_range=0.1,
                                      **SMALL, attn={"layers": [0], "num_heads": 2, "window_size": 8,
                                                     "rope_theta": 500.0})),
    "gla-hybrid-from-jax": ("ccq-jax", ("gla-tiny", dict(num_heads=2, **SMALL, attn={
        "layers": [0], "num_heads": 4, "window_size": 16}))),
    "gdn-hybrid-from-jax": ("ccq-jax", ("gdn-tiny", dict(num_heads=2, head_dim=8, **SMALL, attn={
        "layers": [1], "num_heads": 2, "num_kv_heads": 1, "qkv_bias": True}))),
    "mamba2": ("fla", dict(model_type="mamba2", vocab_size=48, hidden_size=32, num_hidden_layers=2, head_dim=8,
                           state_size=16, n_groups=1, initializer_range=0.1)),
    "mamba2-from-jax": ("ccq-jax", ("mamba2-tiny", dict(vocab_size=48, hidden_size=32, num_hidden_layers=2,
                                                        head_dim=8, state_size=16))),
    "kda-bounded-from-jax": ("ccq-jax", ("kda-tiny", dict(num_heads=2, head_dim=8, safe_gate=True, lower_bound=-5.0,
                                                          conv_size=3, **SMALL))),
}


# name: (the layer's class, in fla.layers and in ccq_jax.layers alike, its keyword arguments)
LAYER_CASES = {
    "gdn2-layer": ("GatedDeltaNet2", dict(hidden_size=32, head_dim=8, num_heads=2, num_v_heads=4, allow_neg_eigval=True,
                                          conv_size=3, norm_eps=1e-5)),
    "gdn2-layer-noconv": ("GatedDeltaNet2", dict(hidden_size=32, head_dim=16, num_heads=2, expand_v=0.5,
                                                 use_short_conv=False, norm_eps=1e-5)),
}


def make_layer_case(name: str, folder: Path, python: str) -> None:
    """fla's layer, its input and output (tests/layers/test_kda.py compares ours with them)."""
    kind, config = LAYER_CASES[name]
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {"kind": kind, "config": config})
    with tempfile.TemporaryDirectory() as tmp:
        config_file = Path(tmp) / "config.json"
        config_file.write_text(json.dumps(config))
        stdout = run_torch_side(python, "layer", "--kind", kind, "--config", str(config_file), "--out", str(folder),
                                "--seed", str(SEED), "--perturb", str(LAYER_PERTURB))
    write_json(folder / "golden.json", {"made_by": f"fla.layers.{kind} init (torch.manual_seed({SEED})), every "
                                                   f"parameter + {LAYER_PERTURB} N(0, 1)",
                                        "torch_side": json.loads(stdout.strip().splitlines()[-1])})


def _fla_init(config: dict, folder: Path, python: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config_file = Path(tmp) / "config.json"
        config_file.write_text(json.dumps(config))
        run_torch_side(python, "init", "--config", str(config_file), "--out", str(folder), "--seed", str(SEED),
                       "--perturb", str(PERTURB))
    (folder / "generation_config.json").unlink(missing_ok=True)  # not needed to rebuild the model


def _ours(preset: str, overrides: dict, folder: Path) -> None:
    """Our model with every parameter drawn at random (CCQ gates included), saved in fla's format."""
    model = CausalLM(get_config(preset, **overrides), rngs=nnx.Rngs(SEED))
    rng = np.random.default_rng(SEED)
    for _, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Param):
            var[...] = var[...] + jnp.asarray(0.1 * rng.standard_normal(var.shape), var.dtype)
    save_fla_checkpoint(model, folder)


def make_case(name: str, folder: Path, python: str) -> dict:
    kind, spec = CASES[name]
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "fla":
        _fla_init(spec, folder, python)
        made = f"fla's init (torch.manual_seed({SEED})), every parameter + {PERTURB} N(0, 1)"
    else:
        _ours(*spec, folder)
        made = f"ccq-jax {spec[0]} {spec[1]}, parameters + 0.1 N(0, 1), save_fla_checkpoint"
    ids = np.random.default_rng(SEED + 1).integers(0, SMALL["vocab_size"], (BATCH, LENGTH))
    np.save(folder / "input_ids.npy", ids.astype(np.int32))
    logits, torch_side = torch_logits(folder, ids, python=python, device="cpu")
    np.save(folder / "logits.npy", logits.astype(np.float32))
    _, model = load_fla_checkpoint(folder, **{"kernel.chunk_size": 16})
    metrics = logit_metrics(model(jnp.asarray(ids, jnp.int32)), logits)
    record = {"made_by": made, "torch_side": torch_side, "ours_at_generation": metrics}
    write_json(folder / "golden.json", record)
    return metrics


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", required=True, help="a Python with torch, transformers and fla")
    parser.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "fla"))
    parser.add_argument("cases", nargs="*", help=f"default: all of {', '.join([*CASES, *LAYER_CASES])}")
    args = parser.parse_args(argv)
    for name in args.cases or [*CASES, *LAYER_CASES]:
        if name in LAYER_CASES:
            make_layer_case(name, Path(args.out) / name, args.torch_python)
            print(f"{name:<16} written (tests/layers/test_kda.py compares our layer)")
            continue
        metrics = make_case(name, Path(args.out) / name, args.torch_python)
        print(f"{name:<16} relative RMS of our logits {metrics['rel_rms']:.2e}, top-1 agreement "
              f"{metrics['top1_agreement']:.1%}")


if __name__ == "__main__":
    main()
