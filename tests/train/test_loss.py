"""The LM loss (train.loss): its cross-entropy and gradient against float64 and autodiff; the sliced loss gives
the same sums and gradients as all positions at once, against an independent float64 reference, for slices
that divide T, do not, or exceed it; and needs less memory."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from train.loss import cross_entropy, loss_sums

B, T, D, V = 2, 37, 16, 50


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((B, T, D)), jnp.float32)
    head = jnp.asarray(rng.standard_normal((D, V)) / 4, jnp.float32)
    batch = {"targets": jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32),
             "loss_mask": jnp.asarray(rng.random((B, T)) < 0.7, jnp.int32)}
    return x, head, batch


def _reference(x, head, batch):
    logits = np.asarray(x, np.float64) @ np.asarray(head, np.float64)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    nll = logz - np.take_along_axis(logits, np.asarray(batch["targets"])[..., None], -1)[..., 0]
    mask = np.asarray(batch["loss_mask"], np.float64)
    correct = ((logits.argmax(-1) == np.asarray(batch["targets"])) & (mask != 0)).sum()
    return (nll * mask).sum(), mask.sum(), correct


@pytest.mark.parametrize("chunk_len", [0, 5, 16, 37, 64])
def test_slices_give_the_sums_and_gradients_of_the_whole(chunk_len):
    x, head, batch = _inputs()
    nll, (tokens, correct, scored) = loss_sums(x, head, None, batch, chunk_len)
    want_nll, want_tokens, want_correct = _reference(x, head, batch)
    np.testing.assert_allclose(float(nll), want_nll, rtol=1e-5)
    assert float(tokens) == want_tokens == float(scored) and float(correct) == want_correct

    grad = lambda n: jax.grad(lambda x, h: loss_sums(x, h, None, batch, n)[0], argnums=(0, 1))(x, head)
    for got, want in zip(grad(chunk_len), grad(0)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("runs", [2, 3, 4, 5])
def test_slices_of_equal_runs_give_the_sums_and_gradients_of_the_whole(runs):
    """runs: each of the equal runs of positions (a context-split sequence's devices) sliced on its own; 5 does not
    divide T = 36 and means one run."""
    x, head, batch = _inputs()
    x, batch = x[:, :36], {k: v[:, :36] for k, v in batch.items()}
    nll, (tokens, correct, _) = loss_sums(x, head, None, batch, 5, runs)
    want_nll, want_tokens, want_correct = _reference(x, head, batch)
    np.testing.assert_allclose(float(nll), want_nll, rtol=1e-5)
    assert float(tokens) == want_tokens and float(correct) == want_correct
    grad = lambda n, r: jax.grad(lambda x, h: loss_sums(x, h, None, batch, n, r)[0], argnums=(0, 1))(x, head)
    for got, want in zip(grad(5, runs), grad(0, 1)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_gradient_matches_float64_finite_differences_direction():
    x, head, batch = _inputs(1)
    f = lambda h: loss_sums(x, h, None, batch, 8)[0]
    direction = jnp.asarray(np.random.default_rng(2).standard_normal(head.shape), jnp.float32)
    analytic = float(jnp.vdot(jax.grad(f)(head), direction))
    eps = 1e-3
    numeric = (_reference(x, head + eps * direction, batch)[0] - _reference(x, head - eps * direction, batch)[0]) / (
        2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-3)


def test_slices_need_less_memory_for_a_large_vocabulary():
    x = jax.ShapeDtypeStruct((2, 512, 64), jnp.float32)
    head = jax.ShapeDtypeStruct((64, 8192), jnp.float32)
    batch = {"targets": jax.ShapeDtypeStruct((2, 512), jnp.int32), "loss_mask": jax.ShapeDtypeStruct((2, 512), jnp.int32)}

    def temp_bytes(chunk_len):
        grad = jax.jit(jax.grad(lambda x, h, b: loss_sums(x, h, None, b, chunk_len)[0], argnums=(0, 1)))
        return grad.lower(x, head, batch).compile().memory_analysis().temp_size_in_bytes

    logits_bytes = 2 * 512 * 8192 * 4
    whole, sliced = temp_bytes(0), temp_bytes(64)
    assert whole >= logits_bytes and sliced < whole / 4, (whole, sliced)


@pytest.mark.parametrize("chunk_len", [0, 3])
def test_scored_positions_give_the_sums_and_gradients_of_all_positions(chunk_len):
    """A batch naming its scored positions: the head applied there only gives the float64 sums of the whole
    masked batch, and the gradients of x and the head of the loss over all T positions."""
    x, head, batch = _inputs(5)
    rng = np.random.default_rng(6)
    at = np.stack([np.sort(rng.choice(T, 7, replace=False)) for _ in range(B)])
    mask = np.zeros((B, T), np.int32)
    np.put_along_axis(mask, at, 1, axis=1)
    full = {**batch, "loss_mask": jnp.asarray(mask)}
    picked = {**full, "scored_positions": jnp.asarray(at, jnp.int32)}
    nll, (tokens, correct, scored) = loss_sums(x, head, None, picked, chunk_len)
    want_nll, want_tokens, want_correct = _reference(x, head, full)
    np.testing.assert_allclose(float(nll), want_nll, rtol=1e-5)
    assert float(tokens) == want_tokens == float(scored) == B * 7 and float(correct) == want_correct
    grad = lambda b: jax.grad(lambda x, h: loss_sums(x, h, None, b, chunk_len)[0], argnums=(0, 1))(x, head)
    for got, want in zip(grad(picked), grad(full)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_scored_positions_of_the_wrong_shape_are_refused():
    x, head, batch = _inputs()
    with pytest.raises(ValueError, match=r"scored_positions: expected integers \[B, P\] with B = 2, got int32 \(7,\)"):
        loss_sums(x, head, None, {**batch, "scored_positions": jnp.zeros(7, jnp.int32)})


def test_negative_chunk_len_is_refused():
    x, head, batch = _inputs()
    with pytest.raises(ValueError, match=r"chunk_len: expected >= 0, got -1"):
        loss_sums(x, head, None, batch, -1)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cross_entropy_and_its_gradient_match_float64(dtype):
    rng = np.random.default_rng(3)
    logits = jnp.asarray(4 * rng.standard_normal((3, 7, V)), dtype)
    targets = jnp.asarray(rng.integers(0, V, (3, 7)), jnp.int32)
    weights = jnp.asarray(rng.standard_normal((3, 7)), jnp.float32)
    nll, vjp = jax.vjp(lambda l: cross_entropy(l, targets), logits)
    (grad,) = vjp(weights)
    wide = np.asarray(logits.astype(jnp.float32), np.float64)
    logz = np.log(np.exp(wide - wide.max(-1, keepdims=True)).sum(-1)) + wide.max(-1)
    want = logz - np.take_along_axis(wide, np.asarray(targets)[..., None], -1)[..., 0]
    probs = np.exp(wide - logz[..., None])
    want_grad = (probs - np.eye(V)[np.asarray(targets)]) * np.asarray(weights, np.float64)[..., None]
    assert nll.dtype == jnp.float32 and grad.dtype == dtype
    np.testing.assert_allclose(np.asarray(nll), want, rtol=1e-6, atol=1e-6)
    tol = 1e-6 if dtype == jnp.float32 else 2**-8  # the gradient is returned in the logits' dtype
    rel_rms = np.sqrt(np.mean((np.asarray(grad, np.float64) - want_grad) ** 2) / np.mean(want_grad**2))
    assert rel_rms < tol, rel_rms


def test_cross_entropy_gradient_rounds_as_autodiff_of_the_fp32_loss():
    """bf16 logits: the same bf16 gradient, bit for bit, as autodiff of optax's fp32 loss of the upcast logits."""
    rng = np.random.default_rng(4)
    logits = jnp.asarray(4 * rng.standard_normal((5, V)), jnp.bfloat16)
    targets = jnp.asarray(rng.integers(0, V, (5,)), jnp.int32)
    ours = jax.grad(lambda l: cross_entropy(l, targets).sum())(logits)
    autodiff = jax.grad(lambda l: optax.softmax_cross_entropy_with_integer_labels(
        l.astype(jnp.float32), targets).sum())(logits)
    assert ours.dtype == autodiff.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(autodiff, np.float32))
