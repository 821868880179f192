"""The TPU kernels compiled ahead of time by the real Mosaic compiler (libtpu) on a CPU, at the 1.3B shapes.

Needs the `tpu` extra (`pip install -e '.[tpu]'`, libtpu) and runs with `-m tpu_aot` under
JAX_PLATFORMS=cpu; .ci/run does both after the main suite. Each case compiles forward and backward
(B=4, T=4096, K=256, V=512; GLA H=4, Gated DeltaNet H=6; the generalized delta rule at fla's
KDA-1.3B, H=16, K=V=128) for a v5e, v5p or v6e device of `jax.experimental.topologies` and
checks that the kernels are Mosaic custom calls and that the program's memory fits the chip's
HBM. Compilation reports VMEM overflow and misaligned blocks, which interpretation and
lowering do not.
"""

import jax
import jax.numpy as jnp
import pytest

import ccq_jax.ops as ops
from train.aot import TPU_HBM_GIB

pytestmark = pytest.mark.tpu_aot
TOPOLOGIES = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
SHAPES_1_3B = {"gla": dict(b=4, t=4096, h=4, dk=256, dv=512),
               "gated_delta_rule": dict(b=4, t=4096, h=6, dk=256, dv=512),
               "generalized_delta_rule": dict(b=4, t=4096, h=16, dk=128, dv=128)}  # fla's KDA-1.3B: 16 heads of 128
KERNEL_CALLS = {"gla": 3, "ccq_gla": 6, "gated_delta_rule": 3, "ccq_gated_delta_rule": 6,  # forward, states, backward
                "generalized_delta_rule": 3}


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
                                        ("ccq_gated_delta_rule", 64), ("generalized_delta_rule", 64)])
def test_kernels_compile(chip, name, chunk):
    """Forward and backward: a backbone's three kernels; a CCQ op's six (the read's covariance and the backbone)."""
    device = _device(chip)
    args = _inputs(name, jax.sharding.SingleDeviceSharding(device))
    loss = lambda *x: jnp.sum(getattr(ops, name)(*x, impl="pallas_mosaic_tpu", chunk_size=chunk, interpret=False)[0]
                              .astype(jnp.float32))
    step = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(args)))))
    compiled = step.trace(*args).lower(lowering_platforms=("tpu",)).compile()
    assert device.device_kind.startswith("TPU v")
    memory = compiled.memory_analysis()
    used = memory.temp_size_in_bytes + memory.argument_size_in_bytes + memory.output_size_in_bytes
    assert used < TPU_HBM_GIB[device.device_kind] * 2**30, used
    assert compiled.as_text().count("tpu_custom_call") == KERNEL_CALLS[name]
