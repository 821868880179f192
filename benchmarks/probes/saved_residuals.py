"""What autodiff keeps for the backward pass of one block of a preset: the saved residuals, largest first.

    PYTHONPATH=. python benchmarks/probes/saved_residuals.py --preset gdn-1.3b --batch 4 --seqlen 4096

Traces one `Block` (mixer + MLP, bf16 compute on `--param-dtype` parameters, `--attn-impl`) with
`jax.ad_checkpoint`'s saved-residual analysis: no compilation and no device memory beyond the
block's parameters and one input, so it runs on a laptop. The total is what the jaxpr keeps; XLA
may keep less (fusion) but not more, per block and step without `remat`.
"""

import argparse

import jax.numpy as jnp
from flax import nnx
from jax._src.ad_checkpoint import saved_residuals

from ccq_jax.models import get_config
from ccq_jax.models.causal_lm import Block


def block_residuals(preset, batch, seqlen, attn_impl="pallas", param_dtype="bfloat16"):
    """[(bytes, shape and dtype, where it comes from)] for one block of `preset`, largest first."""
    cfg = get_config(preset, dtype="bfloat16", param_dtype=param_dtype, **{"kernel.impl": attn_impl})
    graphdef, params = nnx.split(Block(cfg, rngs=nnx.Rngs(0)))
    x = jnp.zeros((batch, seqlen, cfg.hidden_size), jnp.bfloat16)
    segment_ids = jnp.ones((batch, seqlen), jnp.int32)
    block = lambda params, x: nnx.merge(graphdef, params)(x, segment_ids, None)[0]
    rows = [(a.size * a.dtype.itemsize, a.str_short(), where) for a, where in saved_residuals(block, params, x)]
    return sorted(rows, key=lambda r: -r[0])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gdn-1.3b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--attn-impl", default="pallas")
    p.add_argument("--param-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--top", type=int, default=20, help="list this many of the largest")
    a = p.parse_args(argv)
    rows = block_residuals(a.preset, a.batch, a.seqlen, a.attn_impl, a.param_dtype)
    for size, what, where in rows[:a.top]:
        print(f"{size / 2**20:9.1f} MiB  {what:32s} {where[:100]}")
    total = sum(r[0] for r in rows) / 2**30
    print(f"{a.preset}: {total:.2f} GiB kept per block ({len(rows)} arrays)")


if __name__ == "__main__":
    main()
