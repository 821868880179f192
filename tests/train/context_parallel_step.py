"""The training loss and its gradients with each sequence split over the mesh's `context` axis, against one device:
GLA with CCQ and short convolutions (grouped keys; the loss formed 8 positions at a time), Gated DeltaNet with CCQ
(its short convolutions), KDA with CCQ (the generalized delta rule's shard maps, its short convolutions; GDN-2
is the same op with another erase vector: tests/ops/test_context_parallel.py), the Transformer, and two hybrids (`tests.builders.HYBRID_CASES`' attention layers): GLA
with every attention option (a 5-token window, partial RoPE, an output gate and biases on layer 1; multi-query
attention without RoPE on layer 3, whose one key/value head no tensor axis splits) and Gated DeltaNet with its
preset's 8-token window on layer 3, both with short convolutions. Packed documents: in row 0 a document covers
tokens 5-27 of 32, so with context = 4 (8 tokens a device) it spans four shards; in row 1 one starts at token 16, a
shard boundary. Prints one row per (model, mesh): the loss's relative difference, the worst relative RMS over the
gradient leaves, the all-gathers in the compiled program, those of floating-point arrays, and the model's
softmax-attention layers. Then a prefill of the linear models and the hybrids that continues from a cache
(states, statistics, convolution tails and KV caches of an earlier prompt), under a (data 2, context 4) mesh
against one device: one row each, the worst relative RMS over the logits and the new cache. Last the forward of the
Transformer and the GLA hybrid without segment ids, split the same way: a row each, the logits' relative RMS. Run
with 8 fake CPU devices by tests/train/test_context_parallel.py (the linear models) and
tests/train/test_context_parallel_attention.py (the models with softmax attention): two files, so that the suite's
`--dist loadfile` runs them on two workers.

    python -m tests.train.context_parallel_step chunk [MODEL ...]   (default: every model of MODELS)
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ccq_jax.inference import init_cache, prefill
from ccq_jax.layers import Attention
from tests.builders import FP32_TOL, HYBRID_CASES, build, rel_rms
from train.sharding import BATCH_AXES, OPS_AXES, MeshConfig, make_mesh
from train.step import lm_loss, split_model

MODELS = ("ccq-gla", "ccq-gdn", "transformer", "gla-hybrid", "gdn-hybrid", "ccq-kda")
LOSS_CHUNKS = (8, 0, 0, 8, 0, 8)  # the loss over slices of 8 positions (a device's slices each) for some
RECURRENT = ("ccq-gla", "ccq-gdn", "gla-hybrid", "gdn-hybrid", "ccq-kda")  # with a recurrent cache to prefill
UNSEGMENTED = ("transformer", "gla-hybrid")  # with attention layers, also run without segment ids
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
    if name == "gla-hybrid":
        overrides.update(attn=HYBRID_CASES["ccq-gla-hybrid-options"][1]["attn"])
    return build(f"{name}-tiny", overrides)


def main(impl, names):
    data = batch()
    for name, chunk in zip(MODELS, LOSS_CHUNKS):
        if name not in names:
            continue
        lm = model(name, impl)
        attention = sum(isinstance(layer.attn, Attention) for layer in lm.layers)
        graphdef, params, others = split_model(lm)
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
            gathered = [line.split("= ")[1] for line in compiled.as_text().splitlines() if " all-gather(" in line]
            floats = sum(g.startswith(("f32", "bf16", "f16")) for g in gathered)
            print(name, impl, "x".join(f"{k}{v}" for k, v in shape.items()),
                  f"loss {abs(float(got_loss) / float(want_loss) - 1):.2e} grads {worst:.2e} all-gathers "
                  f"{len(gathered)} floats {floats} attention {attention}", flush=True)


def prefill_check(impl, names):
    """Two prompts of 32 tokens on one device; the second again with each row split over 4 devices."""
    data = batch()
    mesh = make_mesh(MeshConfig(data=2, context=4))
    for name in (n for n in RECURRENT if n in names):
        lm = model(name, impl)
        _, cache = prefill(lm, data["input_ids"], init_cache(lm, B, 2 * T))
        second = jnp.flip(data["input_ids"], axis=1)
        want = prefill(lm, second, cache, data["segment_ids"])
        with jax.set_mesh(mesh):
            ids = jax.device_put(second, NamedSharding(mesh, P(BATCH_AXES, "context")))
            got = prefill(lm, ids, cache, data["segment_ids"])
        worst = max(rel_rms(g, w) for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
        print(name, impl, "prefill", f"{worst:.2e}", flush=True)


def unsegmented_check(impl, names):
    """The forward without segment ids (one document a row) of a model with attention layers, each row split over 4
    devices, against one device: the worst relative RMS over the logits."""
    data = batch()
    mesh = make_mesh(MeshConfig(data=2, context=4))
    for name in (n for n in UNSEGMENTED if n in names):
        lm = model(name, impl)
        want = lm(data["input_ids"])
        with jax.set_mesh(mesh):
            got = lm(jax.device_put(data["input_ids"], NamedSharding(mesh, P(BATCH_AXES, "context"))))
        print(name, impl, "forward", f"{rel_rms(got, want):.2e}", flush=True)


def run_and_check(impl, names):
    """Runs this module for `names` in a process of its own with 8 fake CPU devices and asserts its rows: the loss
    and gradients at fp32 round-off on both meshes, the all-gathers (only each attention layer's keys and values
    and the segment ids, without a tensor axis), and the prefills and forwards at fp32 round-off."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "true",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "-m", __spec__.name, impl, *names], cwd=root, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = [line.split() for line in out.stdout.strip().splitlines()]
    steps = [r for r in rows if len(r) == 13]
    others = [r for r in rows if len(r) == 4]
    expected = (len(MESHES) * len(names), sum(n in names for n in RECURRENT)
                + sum(n in names for n in UNSEGMENTED))
    assert (len(steps), len(others)) == expected and len(rows) == sum(expected), out.stdout
    for name, _, _, error in others:
        assert float(error) < 1e-5, (name, error)  # logits (and the new cache), fp32 round-off
    for name, _, mesh, _, loss, _, grads, _, gathers, _, floats, _, attention in steps:
        assert float(loss) < 1e-6 and float(grads) < FP32_TOL, (name, mesh, loss, grads)  # fp32 round-off
        if "tensor" not in mesh:  # keys and values of each attention layer, the segment ids once (if any layer)
            assert int(floats) == 2 * int(attention) and int(gathers) - int(floats) == min(int(attention), 1), (
                name, mesh, gathers, floats, attention)


if __name__ == "__main__":
    chosen = sys.argv[2:] or MODELS
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown:
        sys.exit(f"error: MODEL: expected some of {', '.join(MODELS)}, got {', '.join(unknown)}")
    main(sys.argv[1], chosen)
    prefill_check(sys.argv[1], chosen)
    unsegmented_check(sys.argv[1], chosen)
