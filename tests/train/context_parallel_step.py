"""The training loss and its gradients with each sequence split over the mesh's `context` axis, against one device:
GLA with CCQ and short convolutions (grouped keys; the loss formed 8 positions at a time), Gated DeltaNet with CCQ
(its short convolutions), and the Transformer (XLA partitions its attention), with packed documents: in row 0 a document covers tokens 5-27 of 32, so
with context = 4 (8 tokens a device) it spans four shards; in row 1 one starts at token 16, a shard boundary. Prints
one row per (model, mesh): the loss's relative difference, the worst relative RMS over the gradient leaves, and the
all-gathers in the compiled program. Then a prefill of the linear models that continues from a cache (states,
statistics and convolution tails of an earlier prompt), under a (data 2, context 4) mesh against one device: one
row each, the worst relative RMS over the logits and the new cache. Run by tests/train/test_context_parallel.py
with 8 fake CPU devices.

    python -m tests.train.context_parallel_step chunk
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ccq_jax.inference import init_cache, prefill
from tests.builders import build, rel_rms
from train.sharding import BATCH_AXES, OPS_AXES, MeshConfig, make_mesh
from train.step import lm_loss, split_model

MODELS = ("ccq-gla", "ccq-gdn", "transformer")
MESHES = ({"data": 2, "context": 4}, {"data": 2, "context": 2, "tensor": 2})
B, T = 4, 32


def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 256, (B, T))
    segments = np.ones((B, T), np.int32)
    segments[0, 5:], segments[0, 28:], segments[1, 16:], segments[2, 10:] = 2, 3, 2, 4
    arrays = {"input_ids": ids, "targets": np.roll(ids, -1, 1), "segment_ids": segments,
              "loss_mask": rng.random((B, T)) < 0.8}
    return {k: jnp.asarray(v, jnp.float32 if k == "loss_mask" else jnp.int32) for k, v in arrays.items()}


def model(name, impl):
    """The tiny model of tests.builders.MODEL_CASES' kind, its linear layers with short convolutions, its ops
    splitting the mesh's axes as the train step's do (`train.sharding.OPS_AXES`)."""
    overrides = {"initializer_range": 0.1, "kernel.axes": OPS_AXES}
    if name != "transformer":
        overrides.update({"kernel.impl": impl, "kernel.chunk_size": 16 if impl == "pallas" else 4, "use_short_conv": True})
    if name == "ccq-gla":
        overrides.update(num_kv_heads=2)
    return build(f"{name}-tiny", overrides)


def main(impl):
    data = batch()
    for name, chunk in zip(MODELS, (8, 0, 0)):  # GLA's loss over slices of 8 positions, a device's slices each
        graphdef, params, others = split_model(model(name, impl))
        loss = jax.value_and_grad(lambda p, b: lm_loss(graphdef, p, others, b, chunk)[0])
        want_loss, want = jax.jit(loss)(params, data)
        for shape in MESHES:
            mesh = make_mesh(MeshConfig(**shape))

            def on_mesh(p, b):
                with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                    return loss(p, b)

            placed = (jax.device_put(params, NamedSharding(mesh, P())),
                      jax.device_put(data, NamedSharding(mesh, P(BATCH_AXES))))
            compiled = jax.jit(on_mesh).lower(*placed).compile()
            got_loss, got = compiled(*placed)
            worst = max(rel_rms(g, w) for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
            gathers = compiled.as_text().count(" all-gather(")
            print(name, impl, "x".join(f"{k}{v}" for k, v in shape.items()),
                  f"loss {abs(float(got_loss) / float(want_loss) - 1):.2e} grads {worst:.2e} all-gathers {gathers}",
                  flush=True)


def prefill_check(impl):
    """Two prompts of 32 tokens on one device; the second again with each row split over 4 devices."""
    data = batch()
    mesh = make_mesh(MeshConfig(data=2, context=4))
    for name in MODELS[:2]:
        lm = model(name, impl)
        _, cache = prefill(lm, data["input_ids"], init_cache(lm, B, 2 * T))
        second = jnp.flip(data["input_ids"], axis=1)
        want = prefill(lm, second, cache, data["segment_ids"])
        with jax.set_mesh(mesh):
            ids = jax.device_put(second, NamedSharding(mesh, P(BATCH_AXES, "context")))
            got = prefill(lm, ids, cache, data["segment_ids"])
        worst = max(rel_rms(g, w) for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
        print(name, impl, "prefill", f"{worst:.2e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
    prefill_check(sys.argv[1])
