"""`KernelConfig`: the Triton kernels' tiling as a frozen, validated, static argument of the ops (in place of
patching kernel modules), accepted by the kernel backends only, and changing the tiling but not the results."""

import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from ccq_jax.ops import KernelConfig
from tests.builders import rel_rms


@pytest.mark.parametrize("kw,match", [
    ({"width": 24}, r"KernelConfig.width: expected None or a power of two >= 16, got 24"),
    ({"width": 8}, r"KernelConfig.width"),
    ({"num_warps": 3}, r"KernelConfig.num_warps: expected None or 1, 2, 4, 8 or 16, got 3"),
    ({"num_stages": 0}, r"KernelConfig.num_stages: expected None or >= 1, got 0"),
    ({"num_stages": True}, r"KernelConfig.num_stages"),
])
def test_rejects_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        KernelConfig(**kw)


def test_width_caps_each_kernels_own_choice():
    assert KernelConfig().block(256) == 64 and KernelConfig().block(256, 32) == 32 and KernelConfig().block(16) == 16
    assert KernelConfig(width=128).block(256, 32) == 128 and KernelConfig(width=128).block(64) == 64
    assert hash(KernelConfig(width=32)) == hash(KernelConfig(width=32))  # a static argument of jit


def _inputs():
    rng = np.random.default_rng(3)
    b, t, h, k, v = 1, 40, 1, 64, 64
    q, key = (jnp.asarray(rng.standard_normal((b, t, h, k)), jnp.float32) for _ in range(2))
    val = jnp.asarray(rng.standard_normal((b, t, h, v)), jnp.float32)
    g = jnp.asarray(-rng.uniform(0.01, 0.5, (b, t, h, k)), jnp.float32)
    return q, key, val, g


def test_a_narrower_tiling_gives_the_same_outputs():
    """K = V = 64: the default tiles are 64 wide (one per axis); width=16 runs four along each."""
    q, k, v, g = _inputs()
    want = ops.gla(q, k, v, g, impl="pallas", chunk_size=16)[0]
    got = ops.gla(q, k, v, g, impl="pallas_triton", chunk_size=16, config=KernelConfig(width=16, num_warps=2))[0]
    assert rel_rms(got, want) < 1e-5


def test_only_the_kernel_backends_take_it():
    q, k, v, g = _inputs()
    with pytest.raises(ValueError, match=r"config, interpret: impl='chunk' runs no kernels; leave them unset"):
        ops.gla(q, k, v, g, impl="chunk", config=KernelConfig(width=16))
    with pytest.raises(ValueError, match=r"config: expected a pallas_kernels.tiles.KernelConfig or None"):
        ops.gla(q, k, v, g, impl="pallas", config={"width": 16})
    with pytest.raises(ValueError, match=r"interpret: expected None, True or False, got 'yes'"):
        ops.gla(q, k, v, g, impl="pallas", interpret="yes")
