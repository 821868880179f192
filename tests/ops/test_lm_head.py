"""The LM head on the row-matmul kernel (interpreted here) against a float64 product, gradients included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.ops.internals import MAX_ROWS, head_logits
from pallas_kernels.tiles import KernelConfig
from tests.builders import rel_rms

# rows: one (a decode step), padded within a row tile, several row tiles; D: K splits of 1 to 4 tiles; N: column
# tiles of 128 and of 16 (a vocabulary that is a multiple of 16 only)
CASES = [(1, 512, 256), (5, 256, 400), (40, 64, 48), (MAX_ROWS, 128, 96)]


def inputs(rows, d, n, dtype, seed=0):
    kx, kw = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(kx, (rows, d), jnp.float32).astype(dtype),
            (jax.random.normal(kw, (d, n), jnp.float32) * d ** -0.5).astype(dtype))


@pytest.mark.parametrize("rows,d,n", CASES)
@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-6), (jnp.bfloat16, 4e-3)])
def test_logits_match_a_float64_product(rows, d, n, dtype, tol):
    """fp32: fp32 round-off; bf16: the product rounded to bf16 like XLA's (measured 1.7e-3 as an RMS)."""
    x, w = inputs(rows, d, n, dtype)
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    ours = head_logits(x, w, impl="pallas")
    assert ours.dtype == dtype and ours.shape == (rows, n)
    assert rel_rms(np.asarray(ours, np.float64), exact) < tol
    assert rel_rms(np.asarray(head_logits(x, w, impl="xla"), np.float64), exact) < tol


def test_leading_axes_and_column_width_override():
    x, w = inputs(6, 128, 64, jnp.float32)
    x = x.reshape(2, 3, 128)
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    for config in (None, KernelConfig(width=16, num_warps=2)):
        assert rel_rms(np.asarray(head_logits(x, w, impl="pallas", config=config), np.float64), exact) < 1e-6


def test_gradients_match_a_float64_product():
    x, w = inputs(3, 256, 80, jnp.float32, seed=1)
    cot = jax.random.normal(jax.random.key(2), (3, 80), jnp.float32)
    dx, dw = jax.grad(lambda x, w: jnp.sum(head_logits(x, w, impl="pallas") * cot), argnums=(0, 1))(x, w)
    c64, x64, w64 = (np.asarray(a, np.float64) for a in (cot, x, w))
    assert rel_rms(np.asarray(dx, np.float64), c64 @ w64.T) < 1e-6
    assert rel_rms(np.asarray(dw, np.float64), x64.T @ c64) < 1e-6


@pytest.mark.parametrize("args,kwargs,match", [
    ((MAX_ROWS + 1, 64, 48), {"impl": "pallas"}, "x: impl='pallas' takes at most 64 rows"),
    ((2, 64, 40), {"impl": "pallas"}, r"head: impl='pallas' needs both dims multiples of 16, got \(64, 40\)"),
    ((2, 64, 48), {"impl": "cublas"}, "impl: expected one of"),
    ((2, 64, 48), {"impl": "xla", "interpret": True}, "interpret, config: impl='xla' runs no kernel"),
    ((2, 64, 48), {"impl": "pallas", "config": KernelConfig(width=32)}, "config: width 32 does not divide"),
    ((2, 64, 48), {"impl": "pallas", "config": {"width": 16}}, "config: expected a pallas_kernels.tiles.KernelConfig"),
    ((2, 64, 48), {"impl": "pallas", "interpret": "yes"}, "interpret: expected None, True or False, got 'yes'"),
])
def test_bad_calls_are_value_errors(args, kwargs, match):
    x, w = inputs(*args, jnp.float32)
    with pytest.raises(ValueError, match=match):
        head_logits(x, w, **kwargs)


def test_mismatched_shapes_are_value_errors():
    x, w = inputs(2, 64, 48, jnp.float32)
    with pytest.raises(ValueError, match=r"x, head: expected x \[..., D\] and head \[D, vocab\]"):
        head_logits(x[:, :32], w, impl="pallas")
    with pytest.raises(ValueError, match="x: expected a floating dtype"):
        head_logits(jnp.ones((2, 64), jnp.int32), w)


def test_a_platform_without_the_triton_kernel_is_a_value_error(monkeypatch):
    """The Triton backends' policy (`dispatch.triton_support`): on a TPU only when asked to interpret."""
    x, w = inputs(2, 64, 48, jnp.float32)
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match="impl: 'pallas' has no kernel for this call .*the Triton kernels compile "
                                         "for a GPU only.*; use impl='xla'"):
        head_logits(x, w, impl="pallas")
    assert head_logits(x, w, impl="pallas", interpret=True).shape == (2, 48)
