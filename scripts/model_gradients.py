"""Whole-model gradients of every tiny preset on fixed inputs: the "values unchanged" check of a refactor.

    python scripts/model_gradients.py dump before.npz          # at the commit before the change
    python scripts/model_gradients.py dump after.npz           # after it
    python scripts/model_gradients.py compare before.npz after.npz

Each tiny preset (and each CCQ read policy and option a test would not otherwise reach: cg, neumann, uncentred,
short convolutions) is built with seed 0 and differentiated on one fixed batch of token ids with packed
documents (segment ids) through `train.loss`'s next-token cross-entropy; the loss and every parameter's
gradient are saved under "<preset>/<path>". `compare` prints per preset the largest absolute and relative
difference and how many arrays are bit-identical, and exits 1 when a key is missing on either side.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.models import PRESETS, CausalLM, get_config
from ccq_jax.models.config import apply_overrides

VARIANTS = {  # name: (preset, overrides)
    **{name: (name, {}) for name in sorted(PRESETS) if name.endswith("-tiny")},
    "ccq-gla-tiny+cg": ("ccq-gla-tiny", {"ccq.read": "cg", "ccq.iterations": 3, "ccq.lambda_max": 4.0}),
    "ccq-gdn-tiny+neumann": ("ccq-gdn-tiny", {"ccq.read": "neumann", "ccq.terms": 2}),
    "ccq-gla-tiny+uncentered+conv": ("ccq-gla-tiny", {"ccq.centered": False, "use_short_conv": True}),
}
B, T = 2, 48


def _config(preset, overrides):
    """The preset on XLA's chunked form (`kernel.impl="chunk"`, which a Transformer's policy holds too)."""
    return apply_overrides(get_config(preset, **{"kernel.impl": "chunk"}), overrides)


def gradients(preset, overrides) -> dict[str, np.ndarray]:
    cfg = _config(preset, overrides)
    model = CausalLM(cfg, rngs=nnx.Rngs(0))
    ids = jax.random.randint(jax.random.key(1), (B, T + 1), 0, cfg.vocab_size)
    segments = jnp.where(jnp.arange(T)[None] < jnp.array([[T], [T // 3]]), 1, 2)

    def loss(m):
        logits = m(ids[:, :-1], segment_ids=segments).astype(jnp.float32)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), ids[:, 1:, None], -1))

    value, grads = nnx.value_and_grad(loss)(model)
    out = {"loss": np.asarray(value)}
    out.update({"/".join(map(str, path)): np.asarray(v[...]) for path, v in nnx.to_flat_state(grads)})
    return out


def dump(path):
    arrays = {}
    for name, (preset, overrides) in VARIANTS.items():
        arrays.update({f"{name}/{k}": v for k, v in gradients(preset, overrides).items()})
        print(f"{name}: loss {arrays[f'{name}/loss']:.6f}", flush=True)
    np.savez(path, **arrays)
    print(f"{len(arrays)} arrays -> {path}")


def compare(before_path, after_path) -> int:
    before, after = np.load(before_path), np.load(after_path)
    missing = sorted(set(before.files) ^ set(after.files))
    for name in VARIANTS:
        keys = [k for k in before.files if k.startswith(name + "/") and k in after.files]
        diffs = [np.max(np.abs(before[k].astype(np.float64) - after[k]), initial=0.0) for k in keys]
        scale = [np.max(np.abs(before[k].astype(np.float64)), initial=0.0) for k in keys]
        rel = max((d / s for d, s in zip(diffs, scale) if s > 0), default=0.0)
        same = sum(np.array_equal(before[k], after[k]) for k in keys)
        print(f"{name:32s} {len(keys):4d} arrays, {same:4d} bit-identical, max |diff| {max(diffs, default=0):.3g}, "
              f"max relative {rel:.3g}")
    if missing:
        print(f"keys on one side only: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("dump").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    a = p.parse_args(argv)
    if a.command == "dump":
        dump(a.out)
        return 0
    return compare(a.before, a.after)


if __name__ == "__main__":
    sys.exit(main())
