"""Compile time of a model's initialisation: the whole model as one program against one layer's program (what
`ccq_jax.models.init_split` compiles once per kind of layer), for a deviceless GPU on a CPU or this machine.

    JAX_PLATFORMS=cpu python benchmarks/probes/init_compile.py --preset gdn-1.3b --target h200 \
        --out results/bench/2026-12-07-init-compile-h200.json

Each program is lowered and compiled (not run); a JSON object with both compile times is printed and written.
"""

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.tools.targets import TARGETS, target_device  # noqa: E402
from ccq_jax.models import Block, CausalLM, get_config  # noqa: E402


def compile_seconds(make, device) -> float:
    """Seconds to lower and compile the program that builds `make()`'s parameters and other variables."""
    build = lambda: nnx.split(make(), nnx.Param, ...)[1:]
    shardings = None
    if device is not None:
        shardings = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(device), jax.eval_shape(build))
    begin = time.perf_counter()
    jax.jit(build, out_shardings=shardings).lower().compile()
    return time.perf_counter() - begin


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gdn-1.3b")
    p.add_argument("--target", default="local", choices=["local", *sorted(TARGETS)])
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    cfg, device = get_config(a.preset), target_device(a.target)
    row = {"preset": a.preset, "target": a.target, "layers": cfg.num_hidden_layers,
           "one_layer_s": compile_seconds(lambda: Block(cfg, rngs=nnx.Rngs(0), index=0), device),
           "whole_model_s": compile_seconds(lambda: CausalLM(cfg, rngs=nnx.Rngs(0)), device)}
    print(json.dumps(row), flush=True)
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
