"""The KDA and Gated DeltaNet-2 presets (with and without CCQ) as language models: finite gradients of the LM loss
under jit, the kernels' logits and whole-model gradients equal to the chunk form's, packed rows, prefill +
token-by-token decoding equal to the full forward, generation by a split model."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ccq_jax.inference import generate, split_model
from tests.builders import (build, CHUNK_4, forward, FP32_TOL, INIT, logits_and_grads, prefill_then_decode, rel_rms,
                            token_ids)

# every preset; GVA (value heads 2x the query/key heads) on the CCQ ones, KDA's bounded gate on one
CASES = {
    "kda": ("kda-tiny", dict(INIT, **CHUNK_4)),
    "ccq-kda": ("ccq-kda-tiny", dict(INIT, **CHUNK_4, num_v_heads=4, safe_gate=True, lower_bound=-5.0)),
    "gdn2": ("gdn2-tiny", dict(INIT, **CHUNK_4, allow_neg_eigval=True)),
    "ccq-gdn2": ("ccq-gdn2-tiny", dict(INIT, **CHUNK_4, num_v_heads=4)),
}
# Kimi Linear's pattern in small: KDA with softmax attention (NoPE) on one layer, through fla's `attn` entry
HYBRID = ("ccq-kda-tiny", dict(INIT, **CHUNK_4, num_hidden_layers=3,
                               attn=[dict(layers=[1], num_heads=4, rotary_dim=0)]))
T, PROMPT = 18, 11


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_of_the_lm_loss_are_finite_and_reach_every_parameter(case):
    graphdef, params = nnx.split(build(*CASES[case]))
    ids = token_ids((2, 13))

    def loss(p):
        logits = nnx.merge(graphdef, p)(ids[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(float(value))
    for path, g in nnx.to_flat_state(grads):
        g = np.asarray(g.value)
        assert np.isfinite(g).all() and np.abs(g).max() > 0, path


@pytest.mark.parametrize("case", ["gdn2"])
def test_the_kernels_give_the_chunk_forms_logits_and_gradients(case):
    """kernel.impl="pallas" (the Triton state pass, interpreted on a CPU) against the XLA chunk form, packed rows
    and T = 40 over three chunks of 16: every parameter's gradient (one layer: the interpreter is slow)."""
    name, overrides = CASES[case]
    overrides = dict(overrides, num_hidden_layers=1)
    ids = token_ids((2, 40), seed=3)
    segments = jnp.asarray([[0] * 21 + [1] * 19, [2] * 40], jnp.int32)
    chunk_logits, chunk_grads = logits_and_grads(build(name, overrides), ids, segments)
    kernel_logits, kernel_grads = logits_and_grads(
        build(name, dict(overrides, **{"kernel.impl": "pallas", "kernel.chunk_size": 16})), ids, segments)
    assert rel_rms(kernel_logits, chunk_logits) < 1e-5
    assert [path for path, _ in kernel_grads] == [path for path, _ in chunk_grads]
    for (path, got), (_, want) in zip(kernel_grads, chunk_grads):
        assert float(jnp.max(jnp.abs(want.get_value()))) > 0, path
        assert rel_rms(got.get_value(), want.get_value()) < FP32_TOL, path


@pytest.mark.parametrize("case", [*CASES, "ccq-kda-hybrid"])
def test_prefill_then_decode_reproduces_the_full_forward(case):
    """Row 0 packs two documents (the second continues through decoding), and a packed row equals its documents
    run alone (row 1 holds row 0's first document)."""
    model = build(*CASES.get(case, HYBRID))
    ids = token_ids((3, T), seed=5)
    ids = ids.at[1, :4].set(ids[0, :4])
    segments = jnp.asarray([[0] * 4 + [1] * (T - 4), [3] * T, [0] * T], jnp.int32)
    full = forward(model, ids, segments)
    assert rel_rms(full[0, :4], full[1, :4]) < 1e-5
    assert rel_rms(prefill_then_decode(model, ids, segments, PROMPT), full) < 1e-5


@pytest.mark.parametrize("case", ["kda", "ccq-gdn2"])
def test_a_split_model_generates_as_the_model(case):
    model = build(*CASES[case])
    prompts = token_ids((2, 7), seed=9)
    np.testing.assert_array_equal(generate(split_model(model), prompts, 5), generate(model, prompts, 5))
