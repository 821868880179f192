"""How XLA's GPU runtime will launch the decode loop: its thunk sequence, compiled for an H200 without one.

    JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/probes/decode_thunks.py --preset gla-1.3b --layers 2 \
        --flags "" "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"

For each XLA_FLAGS variant, a child process compiles `decode`'s greedy loop (`--tokens` tokens at `--rows` rows,
the model cut to `--layers` layers if given, Pallas prefill kernels, bf16) for the target (`--target h200`: deviceless,
the `gpu` extra) with `--xla_dump_to`, and this prints what XLA's thunk sequence after its thunk passes holds:
kernels in all, kernels inside command buffers (CUDA graphs, launched as one), and whether the loop stays a
host-driven `kWhile` (its condition read back by the host every token) or was taken into a command buffer.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import jax
from flax import nnx

from benchmarks.inference_kernels import abstract_cache, compiled_text
from benchmarks.tools.targets import target_device
from ccq_jax.inference import decode, split_model
from ccq_jax.inference.split import SplitModel
from ccq_jax.models import CausalLM, get_config

THUNK = re.compile(r"^(?P<indent>\s*)\d+: (?P<kind>k\w+)")


def thunk_summary(text: str) -> dict:
    """{kernels, kernels_in_command_buffers, command_buffers, host_while_loops} of a thunk sequence dump: a kernel
    counts as in a command buffer when a kCommandBuffer line encloses it (less indented, above it); a kWhile
    outside any command buffer is driven by the host."""
    enclosing, summary = [], {"kernels": 0, "kernels_in_command_buffers": 0, "command_buffers": 0,
                              "host_while_loops": 0}
    for line in text.splitlines():
        match = THUNK.match(line)
        if not match:
            continue
        indent, kind = len(match["indent"]), match["kind"]
        while enclosing and enclosing[-1][0] >= indent:
            enclosing.pop()
        inside = any(k == "kCommandBuffer" for _, k in enclosing)
        summary["kernels"] += kind in ("kKernel", "kCustomKernel")
        summary["kernels_in_command_buffers"] += kind in ("kKernel", "kCustomKernel") and inside
        summary["command_buffers"] += kind == "kCommandBuffer"
        summary["host_while_loops"] += kind == "kWhile" and not inside
        enclosing.append((indent, kind))
    return summary


def compile_loop(preset: str, layers: int, rows: int, tokens: int, target: str) -> None:
    """Compile the decode loop once (this process's XLA_FLAGS decide the dump and the variant)."""
    cut = {"num_hidden_layers": layers} if layers else {}
    config = get_config(preset, dtype="bfloat16", param_dtype="bfloat16", **{"kernel.impl": "pallas"}, **cut)
    served = split_model(nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0))))
    run = lambda state, ids, cache: decode(SplitModel(served.graphdef, state, served.key), ids, cache, tokens,
                                           rows=rows)
    ids = jax.ShapeDtypeStruct((rows,), jax.numpy.int32)
    compiled_text(run, (served.state, ids, abstract_cache(served, rows, 64)), target_device(target))


def variant(flags: str, args) -> dict:
    """thunk_summary of the loop compiled in a child process under XLA_FLAGS = `flags` plus a dump folder."""
    with tempfile.TemporaryDirectory() as dump:
        env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_dump_to={dump}".strip()}
        cmd = [sys.executable, __file__, "--compile", "--preset", args.preset, "--layers", str(args.layers),
               "--rows", str(args.rows), "--tokens", str(args.tokens), "--target", args.target]
        subprocess.run(cmd, env=env, check=True)
        dumps = sorted(pathlib.Path(dump).glob("*thunk_sequence_after_thunk_passes.txt"))
        if not dumps:
            raise RuntimeError(f"no thunk sequence dumped under XLA_FLAGS={env['XLA_FLAGS']!r}")
        return {"flags": flags, **thunk_summary(dumps[-1].read_text())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gla-1.3b")
    p.add_argument("--layers", type=int, default=0, help="cut the model to this many layers (0: the preset's)")
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--target", default="h200", help="'local' or a deviceless GPU of benchmarks/inference_kernels.py")
    p.add_argument("--flags", nargs="+", default=["", "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"])
    p.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)  # the child process's part
    a = p.parse_args(argv)
    if a.compile:
        compile_loop(a.preset, a.layers, a.rows, a.tokens, a.target)
        return 0
    for flags in a.flags:
        print(json.dumps({"preset": a.preset, "layers": a.layers, "rows": a.rows, **variant(flags, a)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
