"""The kernels a compiled prefill and decode step launch and the bytes they touch: on this machine's backend, or
compiled here for an H200 without one.

    python benchmarks/inference_kernels.py --target h200 --out results/inference/h200_kernels.jsonl

`--target h200` compiles with XLA's GPU compiler for the GPU that `benchmarks/h200_target.txtpb` describes
(deviceless ahead-of-time compilation: needs the `gpu` extra, `pip install -e '.[gpu]'`, and no GPU; the script
then runs JAX on the CPU, and the Pallas kernels are lowered for that GPU). GEMM tile sizes are not autotuned
without a device, but what is fused, and so which kernels run and what they read and write, is decided before
that. `--target local` compiles for this machine's backend (on a CPU, XLA's CPU fusion, not a GPU's).

For each preset (random init in `--dtype`, prefill through `--attn-impl`): `prefill` B:P of a P-token prompt from an
empty cache (all positions' logits, as `benchmarks/inference.py` times it), and for each decode batch B the step
`ccq_jax.inference.decode` runs per token, at the rows `decode_rows` picks for the target (on a GPU one row runs as
two) and, where that differs, at B rows as before. Per program: the operations its entry computation launches
(each fusion, GEMM, custom call such as a Pallas kernel, copy is a kernel on a GPU) and the bytes they touch, each
kernel's operands and results counted whole: an upper bound on HBM traffic (a gather of one embedding row counts
the table), set beside the weights' bytes and, at `--hbm-tb-s`, the time those bytes take.
"""

import argparse
import collections
import re

import jax
import numpy as np
from flax import nnx

from benchmarks import records
from benchmarks.tools.targets import TARGETS, compiled_for, target_device
from ccq_jax.inference import SplitModel, decode_rows, decode_step, init_cache, prefill
from ccq_jax.models import abstract_model, count_params, get_config

NOT_LAUNCHED = ("parameter", "constant", "bitcast", "get-tuple-element", "tuple")
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ([a-z][\w-]*)\(([^)]*)\)")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8}


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape such as `bf16[2,1024]{1,0}` or a tuple `(f32[4]{0}, s32[])`."""
    return sum(_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
               for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape) if dtype in _BYTES)


def entry_kernels(hlo_text: str) -> list[tuple[str, int]]:
    """(opcode, bytes touched) of each operation the ENTRY computation of compiled HLO text launches: operands and
    results counted whole; parameters, constants, bitcasts and tuples launch nothing."""
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    shapes, kernels = {}, []
    for line in entry.split("\n")[1:]:
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode, operands = match.groups()
        shapes[name] = shape
        if opcode not in NOT_LAUNCHED:
            read = sum(shape_bytes(shapes.get(o, "")) for o in re.findall(r"%([\w.\-]+)", operands))
            kernels.append((opcode, shape_bytes(shape) + read))
    return kernels


def _placed(device):
    """Abstract arrays of a tree placed on `device` (None: left unplaced, the default backend)."""
    sharding = None if device is None else jax.sharding.SingleDeviceSharding(device)
    return lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def compiled_text(fn, args, device=None) -> str:
    """The HLO text of `jax.jit(fn)` compiled for `device` (None: the default backend) at the abstract `args`;
    Pallas kernels lower for that device. Nothing is run (this process's XLA_FLAGS apply, dumps included)."""
    lower = lambda: jax.jit(fn).lower(*_placed(device)(args)).compile().as_text()
    if device is None:
        return lower()
    with jax.default_device(device):
        return lower()


def compiled_kernels(fn, args, device=None) -> dict:
    """{kernels, bytes, by_op} of `compiled_text(fn, args, device)`'s entry computation."""
    kernels = entry_kernels(compiled_text(fn, args, device))
    by_op = collections.Counter(op for op, _ in kernels)
    return {"kernels": len(kernels), "bytes": sum(b for _, b in kernels), "by_op": dict(by_op.most_common())}


def abstract_cache(served: SplitModel, batch: int, max_length: int):
    """The shapes of `init_cache(served, batch, max_length)`, nothing allocated."""
    return jax.eval_shape(lambda s: init_cache(SplitModel(served.graphdef, s), batch, max_length), served.state)


def decode_step_kernels(served: SplitModel, rows: int, device=None) -> dict:
    """`compiled_kernels` of one decode step (`decode_step`) of `rows` rows; `served.state` may be abstract."""
    step = lambda s, t, c: decode_step(SplitModel(served.graphdef, s), t, c, rows=rows)
    tokens = jax.ShapeDtypeStruct((rows,), jax.numpy.int32)
    return compiled_kernels(step, (served.state, tokens, abstract_cache(served, rows, 64)), device)


def prefill_kernels(served: SplitModel, batch: int, prompt: int, device=None) -> dict:
    """`compiled_kernels` of `prefill` of a `prompt`-token prompt for `batch` rows from an empty cache."""
    run = lambda s, ids, c: prefill(SplitModel(served.graphdef, s), ids, c)
    ids = jax.ShapeDtypeStruct((batch, prompt), jax.numpy.int32)
    return compiled_kernels(run, (served.state, ids, abstract_cache(served, batch, prompt)), device)


def impl_pairs(decode_impls, head_impls) -> list[tuple]:
    """The (decode impl, head impl) pairs a decode benchmark compares: each decode impl with the first head impl,
    then the first decode impl with each further head impl (decode_impls [None]: a transformer's one path)."""
    return list(dict.fromkeys([(impl, head_impls[0]) for impl in decode_impls] +
                              [(decode_impls[0], head) for head in head_impls]))


def measure(preset: str, dtype: str, prefills, batches, target: str, attn_impl: str, hbm_tb_s: float,
            decode_impls=("recurrent",), head_impls=("xla",)) -> list[dict]:
    """Records of `preset`'s prefills (B, P) and decode steps (see the module docstring), the steps of a linear
    preset for each of `decode_impls` (B rows as before only for the first), and with the first of them (a
    transformer: its one decode path) for each further LM head of `head_impls` (`ccq_jax.ops.internals.head_logits`)."""
    device = target_device(target)
    platform = jax.default_backend() if device is None else device.platform
    transformer = preset.startswith("transformer")
    linear = {} if transformer else {"kernel.impl": attn_impl}

    def served_with(**impls):
        """The abstract model with `impls`; its kernels lowered for the target (interpret=False), not run here."""
        config = compiled_for(get_config(preset, dtype=dtype, param_dtype=dtype, **linear, **impls), device)
        return config, SplitModel(*nnx.split(abstract_model(config)))

    config, served = served_with()
    steps = {(impl, head): served_with(**{"kernel.head_impl": head,
                                          **({} if impl is None else {"kernel.decode_impl": impl})})[1]
             for impl, head in impl_pairs([None] if transformer else decode_impls, head_impls)}
    base = {"preset": preset, "dtype": dtype, "target": target, "platform": platform,
            "attn_impl": linear.get("kernel.impl"), "weight_bytes": count_params(config) * np.dtype(dtype).itemsize,
            "jax": jax.__version__}
    out = []

    def record(what, counted, **shape):
        out.append({**base, "what": what, **shape, **counted, "per_layer": counted["kernels"] /
                    config.num_hidden_layers, "bytes_ms": 1e3 * counted["bytes"] / (hbm_tb_s * 1e12)})

    for b, p in prefills:
        record("prefill", prefill_kernels(served, b, p, device), batch=b, prompt=p)
    for b in batches:
        for n, ((impl, head), served_step) in enumerate(steps.items()):
            for rows in sorted({decode_rows(b, platform), b} if n == 0 else {decode_rows(b, platform)}, reverse=True):
                record("decode step", decode_step_kernels(served_step, rows, device), batch=b, rows=rows,
                       decode_impl=impl, head_impl=head)
    return out


def shapes(text: str) -> list[tuple[int, int]]:
    """"B:P,B:P" -> [(B, P), ...] (batch, prompt length); "" -> [] (none of that kind)."""
    out = []
    for item in text.split(",") if text else []:
        b, _, p = item.partition(":")
        if not (b.isdigit() and p.isdigit() and int(b) > 0 and int(p) > 0):
            raise argparse.ArgumentTypeError(f"expected B:P pairs of positive integers, got {item!r}")
        out.append((int(b), int(p)))
    return out


def table(rows) -> str:
    lines = ["| preset | what | B | P / rows run | kernels | per layer | GB touched | weights GB | ms at HBM rate |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        what = r["what"] + (f", {r['decode_impl']} step" if r.get("decode_impl") not in (None, "recurrent") else "")
        what += f", {r['head_impl']} head" if r.get("head_impl") not in (None, "xla") else ""
        lines.append(f"| {r['preset']} | {what} | {r['batch']} | {r.get('prompt', r.get('rows'))} | "
                     f"{r['kernels']} | {r['per_layer']:.1f} | {r['bytes'] / 1e9:.2f} | "
                     f"{r['weight_bytes'] / 1e9:.2f} | {r['bytes_ms']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="gla-1.3b,ccq-gla-1.3b,gdn-1.3b,ccq-gdn-1.3b")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--attn-impl", default="pallas", help="prefill kernels of the linear presets (`ccq_jax.ops` impl)")
    p.add_argument("--prefill", type=shapes, default=shapes("1:2048,16:2048"), help="B:P pairs")
    p.add_argument("--batches", default="1,16", type=lambda s: [int(b) for b in s.split(",")], help="decode batches")
    p.add_argument("--decode-impls", default="recurrent,pallas", type=lambda s: s.split(","),
                   help="the linear presets' one-token steps (`ccq_jax.ops` impls)")
    p.add_argument("--head-impls", default="xla", type=lambda s: s.split(","),
                   help="the decode step's LM head (`ccq_jax.ops.internals.head_logits`): each after the first "
                        "with the first decode impl")
    p.add_argument("--target", default="h200", choices=["local", *sorted(TARGETS)])
    p.add_argument("--hbm-tb-s", type=float, default=4.8, help="memory bandwidth for the ms column (H200: 4.8)")
    p.add_argument("--out", help="JSON lines, appended")
    a = p.parse_args(argv)
    if a.target != "local":
        jax.config.update("jax_platforms", "cpu")  # this process runs on the CPU; the GPU is only compiled for
    rows = []
    for preset in a.presets.split(","):
        rows += records.show(measure(preset, a.dtype, a.prefill, a.batches, a.target, a.attn_impl, a.hbm_tb_s,
                                     a.decode_impls, a.head_impls))
    records.append(a.out, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
