"""The TPU kernels compiled ahead of time by the real Mosaic compiler (libtpu) on a CPU, at the 1.3B shapes.

Needs the `tpu` extra (`pip install -e '.[tpu]'`, libtpu) and runs with `-m tpu_aot` under
JAX_PLATFORMS=cpu; .ci/run does both after the main suite. Each case compiles forward and backward
for a v5e, v5p or v6e device of `jax.experimental.topologies` and checks that the kernels are
Mosaic custom calls and that the program's memory fits the chip's HBM. Compilation reports VMEM
overflow and misaligned blocks, which interpretation and lowering do not.
"""

import jax
import jax.numpy as jnp
import pytest

import ccq_jax.ops as ops

pytestmark = pytest.mark.tpu_aot
TOPOLOGIES = {"v5e": ("v5e:2x2", 16), "v5p": ("v5p:2x2x1", 95), "v6e": ("v6e:2x2", 32)}  # name, HBM GiB
GLA_1_3B = dict(b=4, t=4096, h=4, dk=256, dv=512)


def _device(chip):
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    return topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[chip][0]).devices[0]


@pytest.mark.parametrize("chip", sorted(TOPOLOGIES))
@pytest.mark.parametrize("chunk", [64, 128])
def test_gla_compiles(chip, chunk):
    device = _device(chip)
    sharding = jax.sharding.SingleDeviceSharding(device)
    b, t, h, dk, dv = GLA_1_3B.values()
    S = lambda width, dtype: jax.ShapeDtypeStruct((b, t, h, width), dtype, sharding=sharding)
    loss = lambda *x: jnp.sum(ops.gla(*x, impl="pallas_mosaic_tpu", chunk_size=chunk, interpret=False)[0]
                              .astype(jnp.float32))
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    compiled = step.trace(S(dk, jnp.bfloat16), S(dk, jnp.bfloat16), S(dv, jnp.bfloat16), S(dk, jnp.float32)).lower(
        lowering_platforms=("tpu",)).compile()
    assert device.device_kind.startswith("TPU v")
    memory = compiled.memory_analysis()
    used = memory.temp_size_in_bytes + memory.argument_size_in_bytes + memory.output_size_in_bytes
    assert used < TOPOLOGIES[chip][1] * 2**30, used
    assert compiled.as_text().count("tpu_custom_call") == 3
