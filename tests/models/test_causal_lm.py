"""CausalLM: gradients of the LM loss under jit, packed documents, CCQ off = the backbone, dtypes, input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ccq_jax.models import CausalLM, get_config, with_config
from tests.builders import build, forward, inner_jaxprs, MODEL_CASES as CASES, rel_rms, token_ids


def _loss(model, ids):
    logits = model(ids[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()


@pytest.mark.parametrize("case", ["ccq-gla", "ccq-gdn"])
def test_jit_and_grad_of_the_lm_loss(case):
    """jax.grad of the LM loss, compiled, agrees with a central difference along a random direction."""
    graphdef, params = nnx.split(build(*CASES[case]))
    ids = token_ids((2, 13))
    loss_and_grad = jax.jit(jax.value_and_grad(lambda p: _loss(nnx.merge(graphdef, p), ids)))
    loss, grads = loss_and_grad(params)
    for path, g in nnx.to_flat_state(grads):
        g = np.asarray(g.value)
        assert np.isfinite(g).all() and np.abs(g).max() > 0, path
    rng = np.random.default_rng(0)
    direction = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), x.dtype), params)
    eps = 1e-4  # fp32 loss: rounding ~1e-6 / 2e-4 = 0.5% of the slope; curvature matters from 3e-4 on (measured)
    shifted = lambda sign: loss_and_grad(jax.tree.map(lambda p, d: p + sign * eps * d, params, direction))[0]
    numeric = (float(shifted(1)) - float(shifted(-1))) / (2 * eps)
    analytic = sum(float(jnp.vdot(g, d)) for g, d in zip(jax.tree.leaves(grads), jax.tree.leaves(direction)))
    assert np.isfinite(float(loss)) and abs(numeric - analytic) < 1e-2 * abs(analytic)


@pytest.mark.parametrize("case", list(CASES))
def test_a_packed_row_equals_its_documents_run_alone(case):
    """Row 0 packs documents of 7 and 11 tokens; rows 1, 2 hold them alone (causal, so what follows is irrelevant)."""
    model = build(*CASES[case])
    a, b, tail = token_ids((7,), 1), token_ids((11,), 2), token_ids((11,), 3)
    ids = jnp.stack([jnp.concatenate([a, b]), jnp.concatenate([a, tail]), jnp.concatenate([b, tail[:7]])])
    segments = jnp.asarray([[4] * 7 + [9] * 11, [0] * 18, [0] * 18], jnp.int32)  # shapes of test_decode's forward
    logits = forward(model, ids, segments)
    assert rel_rms(logits[0, :7], logits[1, :7]) < 1e-5
    assert rel_rms(logits[0, 7:], logits[2, :11]) < 1e-5


@pytest.mark.parametrize("family", ["gla", "gdn"])
def test_ccq_off_equals_the_backbone_with_the_same_weights(family):
    name, overrides = CASES[f"ccq-{family}"]
    ccq_model = build(name, overrides)
    off = with_config(ccq_model, **{"ccq.mode": "off"})
    plain = CausalLM(get_config(name, ccq=None, **overrides), rngs=nnx.Rngs(7))
    params = nnx.state(ccq_model, nnx.Param).to_pure_dict()
    for layer in params["layers"].values():
        del layer["attn"]["ccq"]
    nnx.update(plain, params)
    ids = token_ids((2, 11))
    np.testing.assert_allclose(forward(off, ids), forward(plain, ids), rtol=1e-6, atol=1e-6)
    assert rel_rms(forward(ccq_model, ids), forward(plain, ids)) > 1e-2  # the learned gate does change the read
    assert off.layers[0].attn.ccq.weight.value is ccq_model.layers[0].attn.ccq.weight.value  # shared, not copied


def test_with_config_rejects_changes_to_the_parameters():
    model = build("gla-tiny")
    with pytest.raises(ValueError, match="overrides: \\['hidden_size'\\] change the model's parameters"):
        with_config(model, hidden_size=32)


def test_bf16_compute_with_fp32_parameters_stays_close_to_fp32():
    name, overrides = CASES["ccq-gdn"]
    fp32 = build(name, overrides)
    bf16 = with_config(fp32, dtype="bfloat16")
    ids = token_ids((2, 11))
    logits = forward(bf16, ids)
    assert logits.dtype == jnp.float32
    assert {x.dtype for x in jax.tree.leaves(nnx.state(bf16, nnx.Param))} == {jnp.dtype("float32")}
    assert rel_rms(logits, forward(fp32, ids)) < 3e-2


def test_input_checks():
    model = build("gla-tiny")
    with pytest.raises(ValueError, match=r"input_ids: expected integer token ids \[B, T\] with T >= 1, got float32"):
        model(jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"segment_ids: expected shape \(2, 3\) \(that of input_ids\), got \(2, 4\)"):
        model(token_ids((2, 3)), jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(ValueError, match=r"cache: expected one entry per layer \(2\), got 1"):
        model(token_ids((2, 3)), cache=(None,))
    with pytest.raises(ValueError, match="config: expected a ModelConfig"):
        CausalLM({"hidden_size": 64}, rngs=nnx.Rngs(0))


def test_token_ids_outside_the_vocabulary_are_named_eagerly_and_pass_under_jit():
    """An id = vocab_size was reported as a NaN gate, -1 wrapped silently; under jit nothing can see the values."""
    model = build("gla-tiny")
    vocab = model.config.vocab_size
    for bad in (vocab, -1):
        ids = token_ids((2, 3)).at[1, 2].set(bad)
        with pytest.raises(ValueError, match=rf"input_ids: expected values in \[0, {vocab - 1}\] \(token ids of a "
                                             rf"vocabulary of vocab_size={vocab}\); found {bad}"):
            model(ids)
    assert nnx.jit(lambda m, x: m(x))(model, token_ids((2, 3)).at[1, 2].set(vocab)).shape == (2, 3, vocab)


def _model_checkpoints(jaxpr) -> int:
    """The checkpoint (remat) equations of a jaxpr, nested ones included, outside loops: a loop's body is an op's own
    (the chunked form's `diagonal_scores` recomputes each step of its `lax.map`), whatever the model's policy."""
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("scan", "while"):
            continue
        count += eqn.primitive.name.startswith(("checkpoint", "remat"))  # jax.checkpoint's primitive is "remat2"
        count += sum(_model_checkpoints(inner) for inner in inner_jaxprs(eqn))
    return count


@pytest.mark.parametrize("name", ["ccq-gla", "ccq-gdn"])
def test_remat_policies_recompute_more_or_less_without_changing_loss_or_gradients(name):
    name, overrides = CASES[name]
    ids = token_ids((2, 13))
    results, checkpoints = [], []
    for policy in ("none", "elementwise", "dots", "block"):
        graphdef, params = nnx.split(build(name, dict(overrides, remat_policy=policy)))
        fn = jax.value_and_grad(lambda p, g=graphdef: _loss(nnx.merge(g, p), ids))
        results.append(jax.jit(fn)(params))
        checkpoints.append(_model_checkpoints(jax.make_jaxpr(fn)(params).jaxpr))  # the norms and the MLP have their own
    # "dots" and "block" add one checkpoint per block around the elementwise ones
    assert checkpoints[0] == 0 and checkpoints[3] == checkpoints[2] > checkpoints[1] > 0, checkpoints
    (loss_a, grads_a), *others = results
    for loss_b, grads_b in others:
        np.testing.assert_allclose(float(loss_a), float(loss_b), rtol=1e-6)
        for a, b in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)):  # recomputation may fuse differently
            assert rel_rms(a, b) < 1e-5
