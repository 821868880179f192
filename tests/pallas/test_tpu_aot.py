"""The TPU kernels compiled ahead of time by the real Mosaic compiler (libtpu) on a CPU, at the 1.3B shapes.

Needs the `tpu` extra (`pip install -e '.[tpu]'`, libtpu) and runs with `-m tpu_aot` under
JAX_PLATFORMS=cpu; .ci/run does both after the main suite. Each case compiles forward and backward
(B=4, T=4096, K=256, V=512; GLA H=4, Gated DeltaNet H=6; the generalized delta rule at fla's
KDA-1.3B, H=16, K=V=128) for a v5e, v5p or v6e device of `jax.experimental.topologies` and
checks that the kernels are Mosaic custom calls and that the program's memory fits the chip's
HBM. Compilation reports VMEM overflow and misaligned blocks, which interpretation and
lowering do not. The attention layers' TPU path (JAX's splash attention, `sdpa_impl="splash"`)
compiles the same way at gdn-hybrid-1.3b's attention shapes.
"""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax.layers import Attention
from ccq_jax.models import get_config
from train.aot import TPU_HBM_GIB

pytestmark = pytest.mark.tpu_aot
TOPOLOGIES = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
SHAPES_1_3B = {"gla": dict(b=4, t=4096, h=4, dk=256, dv=512),
               "gated_delta_rule": dict(b=4, t=4096, h=6, dk=256, dv=512),
               "generalized_delta_rule": dict(b=4, t=4096, h=16, dk=128, dv=128)}  # fla's KDA-1.3B: 16 heads of 128
KERNEL_CALLS = {"gla": 3, "ccq_gla": 6, "gated_delta_rule": 3, "ccq_gated_delta_rule": 6,  # forward, states, backward
                "generalized_delta_rule": 3, "ccq_generalized_delta_rule": 6}


def _device(chip):
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    return topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[chip]).devices[0]


def _inputs(name, sharding):
    backbone = name.removeprefix("ccq_")
    b, t, h, dk, dv = SHAPES_1_3B[backbone].values()
    S = lambda dtype, *shape: jax.ShapeDtypeStruct((b, t, h, *shape), dtype, sharding=sharding)
    q, k, v, lam = S(jnp.bfloat16, dk), S(jnp.bfloat16, dk), S(jnp.bfloat16, dv), S(jnp.float32)
    gates = {"gla": (S(jnp.float32, dk),), "gated_delta_rule": (S(jnp.float32), S(jnp.float32)),
             "generalized_delta_rule": (S(jnp.float32, dk), S(jnp.bfloat16, dk))}[backbone]  # g (and beta, or a)
    return (q, k, v, *gates, lam) if name.startswith("ccq") else (q, k, v, *gates)


@pytest.mark.parametrize("chip", sorted(TOPOLOGIES))
@pytest.mark.parametrize("name,chunk", [("gla", 64), ("gla", 128), ("ccq_gla", 64), ("gated_delta_rule", 64),
                                        ("ccq_gated_delta_rule", 64), ("generalized_delta_rule", 64),
                                        ("ccq_generalized_delta_rule", 64)])
def test_kernels_compile(chip, name, chunk):
    """Forward and backward: a backbone's three kernels; a CCQ op's six (the read's covariance and the backbone)."""
    device = _device(chip)
    args = _inputs(name, jax.sharding.SingleDeviceSharding(device))
    loss = lambda *x: jnp.sum(getattr(ops, name)(*x, impl="pallas_mosaic_tpu", chunk_size=chunk, interpret=False)[0]
                              .astype(jnp.float32))
    _check_compiles(device, jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(args))))), args,
                    KERNEL_CALLS[name])


@pytest.mark.parametrize("chip", sorted(TOPOLOGIES))
@pytest.mark.parametrize("options", [{}, dict(num_kv_heads=4, window_size=1024)])
def test_splash_attention_layer_compiles(chip, options):
    """The attention layers' TPU path (sdpa_impl="splash", JAX's Pallas splash attention) at gdn-hybrid-1.3b's
    attention shapes (hidden 2048, 16 heads of 128; B=4, T=4096, bf16), forward and backward: full attention, and
    packed documents with a sliding window and grouped-query attention; three kernels (forward, dkv, dq)."""
    device = _device(chip)
    cfg = get_config("gdn-hybrid-1.3b")
    (spec,) = cfg.attn
    layer = nnx.eval_shape(lambda: Attention(cfg.hidden_size, num_heads=spec.num_heads, sdpa_impl="splash",
                                             interpret=False, dtype=jnp.bfloat16, rngs=nnx.Rngs(0), **options))
    graph, params = nnx.split(layer)
    on = jax.sharding.SingleDeviceSharding(device)
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on), params)
    x = jax.ShapeDtypeStruct((4, 4096, cfg.hidden_size), jnp.bfloat16, sharding=on)
    segment_ids = jax.ShapeDtypeStruct((4, 4096), jnp.int32, sharding=on) if options else None

    def loss(params, x, segment_ids):
        return jnp.sum(nnx.merge(graph, params)(x, segment_ids=segment_ids)[0].astype(jnp.float32))

    _check_compiles(device, jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), (params, x, segment_ids), 3)


def _check_compiles(device, step, args, kernel_calls):
    """`step` compiles for `device` with libtpu, fits its HBM and holds `kernel_calls` Mosaic custom calls."""
    compiled = step.trace(*args).lower(lowering_platforms=("tpu",)).compile()
    assert device.device_kind.startswith("TPU v")
    memory = compiled.memory_analysis()
    used = memory.temp_size_in_bytes + memory.argument_size_in_bytes + memory.output_size_in_bytes
    assert used < TPU_HBM_GIB[device.device_kind] * 2**30, used
    assert compiled.as_text().count("tpu_custom_call") == kernel_calls
