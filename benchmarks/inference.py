"""Inference against the hardware and against fla: prefill, decode and batched generation, one table.

    PYTHONPATH=. python benchmarks/inference.py --out inference.jsonl                 # ours, the 1.3B presets
    PYTHONPATH=. python benchmarks/inference.py --fla --out inference.jsonl           # and fla's, same call (GPU)
    PYTHONPATH=. python benchmarks/inference.py --presets gla-tiny --prefill 1:64 --decode 1:64 \
        --generate 2:32 --tokens 8 --dtype float32 --attn-impl chunk                  # a CPU smoke run

Ours, per preset (random init, weights and compute in `--dtype`, prefill through `--attn-impl`, default the Pallas
kernels):
- `split`: the host time of `nnx.split(model)`, which every inference call on a module pays and a
  `SplitModel` (`ccq_jax.inference.split_model`) pays once; `graph_hash_ms`: hashing its GraphDef, which jit did
  on every call until a SplitModel kept the hash (`GraphKey`);
- `prefill` B:P: `prefill` of a random prompt from a fresh `init_cache`, the model split once; `prefill,
  re-split` the same through the module (what a call with the module costs); `host_ms`: the time until the calls
  return, before the device has finished (the host's share: splitting, hashing, dispatch);
- `decode` B:P: after a P-token prefill, `decode` of `--tokens` tokens greedily in one compiled loop, per token, at
  the rows `decode_rows` runs (on a GPU one row runs as two) and, where that differs, at B rows as before, for each
  of `--decode-impls` (the linear presets' one-token step: "recurrent", XLA's fusions of the recurrence, or
  "pallas", the one-token kernels of `pallas_kernels.recurrent_step`; B rows only for the first), and with the
  first of them, each of `--head-impls` (the LM head of the step: "xla", XLA's GEMM, or "pallas", the row-matmul
  kernel of `pallas_kernels.row_matmul`);
  `floor_ms` is the weights read once per token at `--hbm-tb-s` (H200: 4.8 TB/s), `state_floor_ms` adds the
  cache read and written once;
- `generate` B:P: `generate` of `--tokens` new tokens after a P-token prompt, prefill included, in tokens/s,
  with the cache's bytes per sequence (constant in P for the linear models);
- with `--profile` (GPU only), `prefill profile` B:P for the first `--prefill` shape and `decode profile` B:P
  for the first `--decode` shape: one call traced (`jax.profiler`), its GPU kernels (per token for decode),
  their busy time and its split by kind (matmul, XLA fusion, copy, Pallas/other), and the span from the first
  kernel's start to the last one's end. A prefill whose span is far below its `ms` waited on the host before
  its first kernel or after its last; busy time far below the span means gaps between kernels. Decode busy time
  near `floor_ms` with a decode time far above it means the step is bound by launches, not by memory: fewer
  kernels per token is then the way down (the loop body is already one CUDA graph by default:
  `benchmarks/probes/decode_thunks.py`);
- with `--count-ops` (any backend), `decode step ops` B: the operations one compiled decode step's entry
  computation launches, by opcode, and the bytes they touch (`benchmarks/inference_kernels.py`, which also compiles
  for an H200 on a machine without one).
Every time is the best of `--repeats` runs after one compiling run; each record of ours keeps the process's
`XLA_FLAGS` (for example `--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL`, the decode loop as one CUDA
graph, set per process). With `--fla`, `benchmarks/inference_fla.py`
times fla's model of each preset's plain backbone (once per backbone) in the same process (bf16, CUDA) and the
table gives the ratio; CCQ presets are compared with their backbone's fla model.
"""

import argparse
import itertools
import json
import os

import jax
import numpy as np
from flax import nnx

from benchmarks import records
from benchmarks.inference_kernels import decode_step_kernels, impl_pairs, shapes
from benchmarks.gpu_trace import by_kind, gpu_kernels, kernel_times, trace_call
from benchmarks.timing import best_seconds, best_times
from ccq_jax.inference import cache_nbytes, decode, decode_rows, generate, init_cache, prefill, split_model
from ccq_jax.models import CausalLM, count_params, get_config, with_config
from ccq_jax.ops import IMPLS
from ccq_jax.ops.internals import HEAD_IMPLS


def _prompt(batch: int, length: int, vocab: int, seed: int = 0):
    return jax.numpy.asarray(np.random.default_rng(seed).integers(0, vocab, (batch, length)), jax.numpy.int32)


TOP_KERNELS = 12  # the kernel names a profile record lists with their time


def kernel_summary(events: list, tokens: int) -> dict:
    """GPU kernels per token of a traced call that made `tokens` tokens (a decode loop; 1 for a whole prefill):
    count, busy milliseconds, busy milliseconds by kind (`benchmarks.gpu_trace.kind`), the span from the first
    kernel's start to the last one's end (busy time far below the span: the GPU waited between kernels, on
    launches or on the host), and the TOP_KERNELS kernel names of most time with their microseconds, from the
    trace's events."""
    kernels = gpu_kernels(events)
    times = kernel_times(kernels)[0]
    per_kind = {k: us / 1e3 / tokens for k, us in by_kind(times).items()}
    span_us = (max(e["ts"] + e.get("dur", 0.0) for e in kernels) - min(e["ts"] for e in kernels)) if kernels else 0.0
    top = sorted(times.items(), key=lambda item: -item[1])[:TOP_KERNELS]
    return {"kernels_per_token": len(kernels) / tokens, "kernel_ms_per_token": sum(per_kind.values()),
            "span_ms_per_token": span_us / 1e3 / tokens, "by_kind_ms": per_kind,
            "top_kernels_us_per_token": {name: us / tokens for name, us in top}}


def ours(preset: str, dtype: str, prefills, decodes, generates, tokens: int, repeats: int, hbm_tb_s: float,
         profile: bool = False, count_ops: bool = False, attn_impl: str = "chunk", decode_impls=("recurrent",),
         head_impls=("xla",)):
    """Records of our side for one preset (see the module docstring), yielded as each is measured, so that a
    run stopped by a time limit keeps what it measured; `attn_impl`: the linear presets' prefill kernels
    (`ccq_jax.ops` impl); `decode_impls`: their one-token steps, each decode shape timed with each (generation runs
    the first); `head_impls`: the decode step's LM head, each timed with the first decode impl. The arguments are
    checked here, before anything is built."""
    if profile and jax.default_backend() != "gpu":
        raise ValueError(f"profile: the profiles read GPU kernels; expected a GPU backend, got "
                         f"{jax.default_backend()!r}")
    if not decode_impls or any(impl not in IMPLS for impl in decode_impls):
        raise ValueError(f"decode_impls: expected one or more of {sorted(IMPLS)}, got {list(decode_impls)}")
    if not head_impls or any(impl not in HEAD_IMPLS for impl in head_impls):
        raise ValueError(f"head_impls: expected one or more of {HEAD_IMPLS}, got {list(head_impls)}")
    return _measure(preset, dtype, prefills, decodes, generates, tokens, repeats, hbm_tb_s, profile, count_ops,
                    attn_impl, tuple(decode_impls), tuple(head_impls))


def _measure(preset, dtype, prefills, decodes, generates, tokens, repeats, hbm_tb_s, profile, count_ops, attn_impl,
             decode_impls, head_impls):
    """The generator behind `ours`."""
    transformer = preset.startswith("transformer")
    linear = {} if transformer else {"kernel.impl": attn_impl, "kernel.decode_impl": decode_impls[0]}
    config = get_config(preset, dtype=dtype, param_dtype=dtype, **linear)
    model = CausalLM(config, rngs=nnx.Rngs(0))
    served = split_model(model)
    # the model (its parameters shared) with each (decode impl, head impl) of `impl_pairs`
    steps = {(impl, head): split_model(with_config(model, **{"kernel.head_impl": head}, **({} if impl is None else
                                                                          {"kernel.decode_impl": impl})))
             for impl, head in impl_pairs([None] if transformer else decode_impls, head_impls)}
    weight_bytes = count_params(config) * np.dtype(dtype).itemsize
    base = {"side": "ours", "preset": preset, "dtype": dtype, "device": jax.devices()[0].device_kind,
            "xla_flags": os.environ.get("XLA_FLAGS", ""), **({"attn_impl": attn_impl} if linear else {})}
    yield {**base, "what": "split", "ms": 1e3 * best_seconds(lambda: nnx.split(model)[1], repeats),
           "graph_hash_ms": 1e3 * best_seconds(lambda: hash(served.graphdef), repeats, wait=lambda _: None)}
    if count_ops:
        for ((impl, head), stepping), b in itertools.product(steps.items(), sorted({b for b, _ in decodes})):
            step = decode_step_kernels(stepping, decode_rows(b, jax.default_backend()))
            yield {**base, "what": "decode step ops", "batch": b, "decode_impl": impl, "head_impl": head,
                   "ops": step["kernels"],
                   "bytes": step["bytes"], "by_op": step["by_op"],
                   "per_layer": step["kernels"] / config.num_hidden_layers}
    for b, p in prefills:
        ids = _prompt(b, p, config.vocab_size)
        for what, m in (("prefill", served), ("prefill, re-split", model)):
            done, returned = best_times(lambda: prefill(m, ids, init_cache(m, b, p))[0], repeats)
            yield {**base, "what": what, "batch": b, "prompt": p, "ms": 1e3 * done, "host_ms": 1e3 * returned}
        if profile and (b, p) == prefills[0]:
            events = trace_call(lambda: prefill(served, ids, init_cache(served, b, p))[0])
            yield {**base, "what": "prefill profile", "batch": b, "prompt": p, **kernel_summary(events, 1)}
    for b, p in decodes:
        logits, cache = prefill(served, _prompt(b, p, config.vocab_size), init_cache(served, b, p + tokens))
        first = logits[:, -1].argmax(-1)
        floor = weight_bytes / (hbm_tb_s * 1e12)
        for n, ((impl, head), stepping) in enumerate(steps.items()):
            runs = decode_rows(b, jax.default_backend())
            for rows in sorted({runs, b} if n == 0 else {runs}, reverse=True):  # what runs; B rows as before
                seconds = best_seconds(lambda: decode(stepping, first, cache, tokens, rows=rows)[0], repeats) / tokens
                yield {**base, "what": "decode", "batch": b, "prompt": p, "rows": rows, "decode_impl": impl,
                       "head_impl": head, "ms": 1e3 * seconds, "floor_ms": 1e3 * floor,
                       "state_floor_ms": 1e3 * (floor + 2 * cache_nbytes(cache) / (hbm_tb_s * 1e12))}
            if profile and (b, p) == decodes[0]:
                events = trace_call(lambda: decode(stepping, first, cache, tokens)[0])  # compiled by the timing
                yield {**base, "what": "decode profile", "batch": b, "prompt": p, "decode_impl": impl,
                       "head_impl": head, **kernel_summary(events, tokens)}
    for b, p in generates:
        ids = _prompt(b, p, config.vocab_size)
        seconds = best_seconds(lambda: generate(served, ids, tokens), repeats)
        yield {**base, "what": "generate", "batch": b, "prompt": p, "ms": 1e3 * seconds,
               "tokens_per_s": b * tokens / seconds,
               "cache_bytes_per_sequence": cache_nbytes(init_cache(served, 1, p + tokens))}


def table(records) -> str:
    """Markdown: one row per measurement of ours, with fla's time and ours / fla where fla ran it (CCQ presets
    against fla's model of their backbone)."""
    fla = {(r["preset"], r["what"], r.get("batch"), r.get("prompt")): r["ms"] for r in records if r["side"] == "fla"}
    lines = ["| preset | what | B | P | ours ms | fla ms | ours / fla | fla HF generate ms | floor ms | tokens/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in records if r["side"] == "ours" and "ms" in r):
        plain = r["preset"].removeprefix("ccq-")  # a CCQ preset is compared with fla's model of its backbone
        theirs = fla.get((plain, r["what"], r.get("batch"), r.get("prompt")))
        hf = fla.get((plain, "decode, HF generate", r.get("batch"), r.get("prompt"))) if r["what"] == "decode" else None
        what = r["what"] + (f", {r['rows']} rows run" if r.get("rows", r.get("batch")) != r.get("batch") else "")
        what += f", {r['decode_impl']} step" if r.get("decode_impl") not in (None, "recurrent") else ""
        what += f", {r['head_impl']} head" if r.get("head_impl") not in (None, "xla") else ""
        cells = [r["preset"], what, r.get("batch", "-"), r.get("prompt", "-"), f"{r['ms']:.2f}",
                 f"{theirs:.2f}" if theirs else "-", f"{r['ms'] / theirs:.2f}" if theirs else "-",
                 f"{hf:.2f}" if hf else "-", f"{r['floor_ms']:.3f}" if "floor_ms" in r else "-",
                 f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else "-"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="gla-1.3b,ccq-gla-1.3b")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--attn-impl", default="pallas", help="prefill kernels of the linear presets (`ccq_jax.ops` impl)")
    p.add_argument("--decode-impls", default="recurrent,pallas", type=lambda s: s.split(","),
                   help="the linear presets' one-token steps to time decoding with (`ccq_jax.ops` impls)")
    p.add_argument("--head-impls", default="xla,pallas", type=lambda s: s.split(","),
                   help="the decode step's LM head to time decoding with (`ccq_jax.ops.internals.head_logits`)")
    p.add_argument("--prefill", type=shapes, default=shapes("1:2048,16:2048,1:16384"))
    p.add_argument("--decode", type=shapes, default=shapes("1:2048,16:2048"))
    p.add_argument("--generate", type=shapes, default=shapes("1:512,16:2048,64:512,16:8192"))
    p.add_argument("--tokens", type=int, default=128, help="new tokens per decode / generate")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hbm-tb-s", type=float, default=4.8, help="memory bandwidth for the decode floor")
    p.add_argument("--fla", action="store_true", help="also time fla's plain backbones (needs torch, fla, CUDA)")
    p.add_argument("--profile", action="store_true",
                   help="trace the first prefill shape's and the first decode shape's GPU kernels")
    p.add_argument("--count-ops", action="store_true", help="count the operations of one compiled decode step")
    p.add_argument("--out", help="JSON lines, appended as each record is measured")
    p.add_argument("--table", nargs="+", metavar="JSONL",
                   help="measure nothing: print the table and summaries of records written by earlier runs")
    a = p.parse_args(argv)
    if a.tokens < 1 or a.repeats < 1:
        p.error(f"--tokens and --repeats: expected >= 1, got {a.tokens} and {a.repeats}")
    if a.table:
        summarise([json.loads(line) for path in a.table for line in open(path) if line.strip()])
        return 0
    results = []
    for preset in a.presets.split(","):
        new = ours(preset, a.dtype, a.prefill, a.decode, a.generate, a.tokens, a.repeats, a.hbm_tb_s, a.profile,
                   a.count_ops, a.attn_impl, a.decode_impls, a.head_impls)
        plain = preset.removeprefix("ccq-")
        if a.fla and not any(r["side"] == "fla" and r["preset"] == plain for r in results):
            from benchmarks.inference_fla import fla_records  # torch and transformers only when asked for

            # fla first: it compiles nothing, so a time limit that stops the run leaves both sides of the first shapes
            new = itertools.chain(fla_records(plain, a.prefill, a.decode, a.tokens, a.repeats), new)
        for record in new:  # each kept as soon as it is measured
            results += records.show([record])
            records.append(a.out, [record])
    summarise(results)
    return 0


def summarise(results) -> None:
    """Print the table of `results` and a line per decode step count and per profile."""
    print(table(results))
    for r in (r for r in results if r["what"] == "decode step ops"):
        print(f"{r['preset']} decode step B={r['batch']} {r.get('decode_impl') or ''}: {r['ops']} operations "
              f"({r['per_layer']:.1f} per layer), "
              f"{r['bytes'] / 1e9:.3f} GB touched: {r['by_op']}")
    for r in (r for r in results if r["what"] in ("prefill profile", "decode profile")):
        print(f"{r['preset']} {r['what']} B={r['batch']} P={r['prompt']} {r.get('decode_impl') or ''}: "
              f"{r['kernels_per_token']:.0f} kernels, "
              f"{r['kernel_ms_per_token']:.3f} ms busy in a {r.get('span_ms_per_token', float('nan')):.3f} ms span"
              f"{' per token' if r['what'] == 'decode profile' else ''}, by kind {r['by_kind_ms']}")


if __name__ == "__main__":
    raise SystemExit(main())
