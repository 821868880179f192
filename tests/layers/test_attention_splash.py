"""Splash attention (`sdpa_impl="splash"`, JAX's Pallas TPU kernel) interpreted on the CPU equals the XLA reference
path: the layer's forward and gradients with packed documents, a sliding window and grouped-query attention; T
padded to the kernel's blocks; a hybrid model's logits; refusals by name (a GPU without the interpreter, an explicit
mask, an unknown impl). The TPU compilation is in tests/pallas/test_tpu_aot.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax.layers import Attention
from tests.builders import build, forward, token_ids

TOL = 1e-5  # fp32: the kernel's online softmax against XLA's one pass (measured <= 6e-7 of the largest value)
B, T, D = 2, 256, 256


def _layer(impl, **options):
    return Attention(D, num_heads=4, sdpa_impl=impl, rngs=nnx.Rngs(0), **options)


def _segments(t):
    """Three documents per row, the second row's ids not monotone."""
    return jnp.asarray(np.stack([np.repeat([0, 1, 2], [90, 100, t - 190]), np.repeat([5, 3, 7], [30, 140, t - 170])]),
                       jnp.int32)


@pytest.mark.parametrize("options,packed", [(dict(), False), (dict(num_kv_heads=2, window_size=64), True)])
def test_layer_equals_xla(options, packed):
    """Forward and the gradients of every parameter and of x, splash (interpreted) against XLA."""
    x = jnp.asarray(np.random.default_rng(1).standard_normal((B, T, D)), jnp.float32)
    segment_ids = _segments(T) if packed else None

    def loss_and_grads(impl):
        model = _layer(impl, **options)
        loss = lambda model, x: jnp.sum(jnp.sin(model(x, segment_ids=segment_ids)[0]))
        return nnx.value_and_grad(loss, argnums=(0, 1))(model, x)

    (want, (want_params, want_x)), (got, (got_params, got_x)) = loss_and_grads("xla"), loss_and_grads("splash")
    np.testing.assert_allclose(got, want, rtol=TOL)
    np.testing.assert_allclose(got_x, want_x, rtol=TOL, atol=TOL * float(jnp.abs(want_x).max()))
    for (path, g), (_, w) in zip(nnx.to_flat_state(nnx.state(got_params)), nnx.to_flat_state(nnx.state(want_params))):
        np.testing.assert_allclose(g[...], w[...], rtol=TOL, atol=TOL * float(jnp.abs(w[...]).max()),
                                   err_msg=str(path))


def test_unaligned_length_is_padded():
    """T = 200 (not a multiple of the kernel's 128-token blocks) with documents and a window, GQA 4:1."""
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.standard_normal((1, 200, 4, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((1, 200, 1, 64)), jnp.float32) for _ in range(2))
    segment_ids = jnp.asarray(np.repeat([[3, 4]], [120, 80], axis=1), jnp.int32)
    want = ops.attention(q, k, v, segment_ids=segment_ids, window=50, impl="xla")
    got = ops.attention(q, k, v, segment_ids=segment_ids, window=50, impl="splash")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_hybrid_model_logits():
    """A GDN hybrid (a windowed attention layer) with sdpa_impl="splash" gives the logits of "xla"."""
    ids, segment_ids = token_ids((2, 24)), jnp.asarray(np.repeat([[0, 1]], [10, 14], axis=1).repeat(2, 0))
    want = forward(build("gdn-hybrid-tiny", dict(sdpa_impl="xla")), ids, segment_ids)
    got = forward(build("gdn-hybrid-tiny", dict(sdpa_impl="splash")), ids, segment_ids)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_refusals(monkeypatch):
    q = jnp.zeros((1, 128, 2, 64))
    with pytest.raises(ValueError, match="sdpa_impl: expected one of"):
        ops.attention(q, q, q, impl="flash")
    with pytest.raises(ValueError, match="sdpa_impl: expected one of"):
        _layer("pallas")
    with pytest.raises(ValueError, match="mask: an explicit mask"):
        ops.attention(q, q, q, mask=jnp.ones((1, 1, 128, 128), bool), impl="splash")
    with pytest.raises(ValueError, match="interpret: only sdpa_impl='splash'"):
        ops.attention(q, q, q, impl="xla", interpret=True)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(ValueError, match="sdpa_impl: 'splash' is a TPU kernel and does not run on platform 'gpu'"):
        ops.attention(q, q, q, impl="splash")


def test_attention_refuses_shapes_and_windows_by_name():
    q = jnp.zeros((1, 16, 4, 8))
    with pytest.raises(ValueError, match=r"q, k, v: expected \[B, T, H, D\] and two \[B, T, Hkv, D\] .* with Hkv "
                                         r"dividing H, got \(1, 16, 4, 8\), \(1, 16, 3, 8\), \(1, 16, 3, 8\)"):
        ops.attention(q, q[:, :, :3], q[:, :, :3])
    with pytest.raises(ValueError, match=r"q, k, v: expected .*got \(1, 16, 4, 8\), \(1, 16, 4, 8\), \(1, 8, 4, 8\)"):
        ops.attention(q, q, q[:, :8])
    for window in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"window: expected a positive int or None, got {window!r}"):
            ops.attention(q, q, q, window=window)
