"""Per-token decoding time against context length for tiny models on CPU (linear attention stays flat).

    PYTHONPATH=. python benchmarks/decode.py                                  # every tiny family, 256..4096
    PYTHONPATH=. python benchmarks/decode.py --presets gla-tiny --contexts 512 8192 --out decode.jsonl --png decode.png

For each preset and context length L, a random prompt of L tokens is prefilled
(`ccq_jax.inference.prefill`), then `ccq_jax.inference.decode` generates `--tokens` tokens
greedily in one compiled loop from that cache; the time per token is the loop's time divided
by `--tokens`, the minimum over `--repeats` runs after one compiling run. The cache holds
L + `--tokens` positions: constant in size for the linear models, growing with L for the
Transformer's KV cache (whose decode step attends over all of it).
"""

import argparse
import json

import jax
from flax import nnx
from ccq_jax.progress import progress as progress_bar

from benchmarks.inference import best_seconds
from ccq_jax.figures import pyplot, save_png
from ccq_jax.inference import cache_nbytes, decode, init_cache, prefill
from ccq_jax.models import CausalLM, get_config

PRESETS = ("gla-tiny", "ccq-gla-tiny", "gdn-tiny", "ccq-gdn-tiny", "transformer-tiny")


def measure(model, context, *, batch, tokens, repeats, seed=0):
    """One record: seconds per decoded token (per batch step) and cache bytes at this context length."""
    prompt = jax.random.randint(jax.random.key(seed), (batch, context), 0, model.config.vocab_size)
    logits, cache = prefill(model, prompt, init_cache(model, batch, context + tokens))
    first = logits[:, -1].argmax(-1)
    seconds = best_seconds(lambda: decode(model, first, cache, tokens), repeats)
    return {"context": context, "batch": batch, "seconds_per_token": seconds / tokens,
            "cache_bytes": cache_nbytes(cache)}


def plot(records, path):
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for preset in dict.fromkeys(r["preset"] for r in records):
        rows = [r for r in records if r["preset"] == preset]
        ax.plot([r["context"] for r in rows], [1e3 * r["seconds_per_token"] for r in rows], marker="o", label=preset)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("ms per decoded token")
    ax.set_title(f"decode step, {jax.devices()[0].platform.upper()}")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--contexts", nargs="+", type=int, default=[256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128, help="decoded tokens timed per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="append one JSON record per measurement to this JSONL file")
    ap.add_argument("--png", help="plot ms per token against context length into this PNG")
    args = ap.parse_args(argv)

    records = []
    jobs = [(p, c) for p in args.presets for c in args.contexts]
    models = {p: CausalLM(get_config(p), rngs=nnx.Rngs(0)) for p in args.presets}
    for preset, context in progress_bar(jobs, desc="decode benchmark", unit="run"):
        rec = {"preset": preset, **measure(models[preset], context, batch=args.batch, tokens=args.tokens,
                                           repeats=args.repeats)}
        records.append(rec)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")

    print(f"\n{jax.devices()[0].device_kind}, batch {args.batch}, {args.tokens} tokens timed per run")
    print(f"{'preset':<18} {'context':>8} {'ms/token':>10} {'cache KiB':>11}")
    for r in records:
        print(f"{r['preset']:<18} {r['context']:>8} {1e3 * r['seconds_per_token']:>10.3f} "
              f"{r['cache_bytes'] / 1024:>11.1f}")
    if args.png:
        plot(records, args.png)


if __name__ == "__main__":
    main()
