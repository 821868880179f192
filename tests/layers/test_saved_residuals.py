"""The norms, the short convolution and the SwiGLU product are recomputed in the backward pass: what autodiff keeps of them is their
inputs, in their own dtype, never a float32 copy or an intermediate (the memory of a 1.3B step depends on it); the l2
normalisation keeps its output (which the delta rule keeps too) and its inverse norm instead of its input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.ad_checkpoint import saved_residuals

from ccq_jax.layers.conv import causal_conv_silu
from ccq_jax.layers.gated_deltanet import l2_normalized
from ccq_jax.layers.mlp import swiglu_down
from ccq_jax.layers.norm import gated_rms_norm, rms_norm
from ccq_jax.ops import l2_normalize

B, T, D = 2, 8, 64


def _kept(f, *args):
    """The shapes and dtypes autodiff keeps for f's backward pass, as (shape, dtype name) pairs."""
    return sorted((tuple(a.shape), a.dtype.name) for a, _ in saved_residuals(f, *args))


def _x(*shape, dtype=jnp.bfloat16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def test_rms_norm_keeps_its_input_and_weight():
    x, w = _x(B, T, D), _x(D, dtype=jnp.float32, seed=1)
    assert _kept(lambda x, w: rms_norm(x, w, 1e-6, jnp.bfloat16), x, w) == sorted([((B, T, D), "bfloat16"),
                                                                                   ((D,), "float32")])


def test_gated_rms_norm_keeps_its_inputs():
    x, g, w = _x(B, T, D), _x(B, T, D, seed=2), _x(D, dtype=jnp.float32, seed=1)
    kept = _kept(lambda x, g, w: gated_rms_norm(x, g, w, 1e-6, jnp.bfloat16), x, g, w)
    assert kept == sorted([((B, T, D), "bfloat16"), ((B, T, D), "bfloat16"), ((D,), "float32")])


def test_swiglu_keeps_gate_up_and_the_kernel():
    gate, up, kernel = _x(B, T, 4 * D), _x(B, T, 4 * D, seed=3), _x(4 * D, D, seed=4)
    kept = _kept(lambda g, u, k: swiglu_down(g, u, k, jnp.bfloat16), gate, up, kernel)
    assert kept == [((B, T, 4 * D), "bfloat16"), ((B, T, 4 * D), "bfloat16"), ((4 * D, D), "bfloat16")]


def test_short_convolution_keeps_its_input_and_kernel():
    width = 4
    ext, kernel = _x(B, width - 1 + T, D), _x(width, D, dtype=jnp.float32, seed=5)
    docs = jnp.repeat(jnp.array([[0, 1]]), B, axis=0).repeat(T // 2, axis=1)
    ext_docs = jnp.concatenate([jnp.zeros((B, width - 1), docs.dtype), docs], axis=1)
    kept = _kept(lambda e, k: causal_conv_silu(e, ext_docs, docs, k, jnp.bfloat16), ext, kernel)
    assert kept == sorted([((B, width - 1 + T, D), "bfloat16"), ((width, D), "float32"), ((B, T), "int32"),
                           ((B, width - 1 + T), "int32")])


def test_l2_normalisation_keeps_its_output_and_the_inverse_norm():
    """The output is the array the delta rule keeps anyway; the fp32 inverse norm is one number a row."""
    x = _x(B, T, 2, D)
    assert _kept(l2_normalized, x) == [((B, T, 2, 1), "float32"), ((B, T, 2, D), "bfloat16")]


def test_l2_normalisation_gradient_equals_the_float64_autodiff():
    """l2_normalized's own backward (from its output and inverse norm) on fp32 inputs against autodiff of
    `ops.l2_normalize` in float64, on fresh random rows of many scales (one of them zero, where eps keeps the norm
    finite) and a random cotangent."""
    rng = np.random.default_rng(7)
    x64 = rng.standard_normal((B, T, 3, D)) * rng.uniform(0.01, 10, (B, T, 3, 1))
    x64[0, 0, 0] = 0.0
    dy64 = rng.standard_normal(x64.shape)
    y, vjp = jax.vjp(l2_normalized, jnp.asarray(x64, jnp.float32))
    (got,) = vjp(jnp.asarray(dy64, jnp.float32))
    with jax.enable_x64(True):
        want_y, want_vjp = jax.vjp(l2_normalize, jnp.asarray(x64))
        (want,) = want_vjp(jnp.asarray(dy64))
        want_y, want = np.asarray(want_y), np.asarray(want)
    assert y.dtype == got.dtype == jnp.float32
    np.testing.assert_allclose(y, want_y, rtol=2e-6, atol=2e-7)
    # per row: the gradient scales as 1 / |x|, so each row is held to its own largest entry
    row_scale = np.max(np.abs(want), axis=-1, keepdims=True)
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= 4e-6 * row_scale + 1e-30)
    assert np.all(np.isfinite(np.asarray(got)))


def test_recomputation_changes_no_value_or_gradient():
    """Against the same functions without jax.checkpoint (`__wrapped__`), float32."""
    x, g, w = _x(B, T, D, dtype=jnp.float32), _x(B, T, D, dtype=jnp.float32, seed=2), _x(D, dtype=jnp.float32)
    kernel = _x(D, D, dtype=jnp.float32, seed=4)

    def loss(norm, gated, swiglu):
        def f(x, g, w, kernel):
            y = gated(x, g, w, 1e-6, jnp.float32) + norm(x, w, 1e-6, jnp.float32)
            return jnp.sum(swiglu(y, x, kernel, jnp.float32) ** 2)
        return f

    lean = loss(rms_norm, gated_rms_norm, swiglu_down)
    plain = loss(rms_norm.__wrapped__, gated_rms_norm.__wrapped__, swiglu_down.__wrapped__)
    args = (x, g, w, kernel)
    assert len(saved_residuals(lean, *args)) < len(saved_residuals(plain, *args))
    np.testing.assert_allclose(lean(*args), plain(*args), rtol=1e-6)
    for a, b in zip(jax.grad(lean, argnums=(0, 1, 2, 3))(*args), jax.grad(plain, argnums=(0, 1, 2, 3))(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * float(jnp.max(jnp.abs(b))))
