"""The model adapters (`eval.models`) against direct calls of the model and of `ccq_jax.inference`, and the keys
the linear-attention layers record under `nnx.capture` (for Delta-mu)."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.inference import generate
from ccq_jax.layers.shapes import split_heads
from ccq_jax.tokenizers import ByteTokenizer
from eval.models import ModelRunner, TextTokenizer, bucket
from tests.builders import build, rel_rms, token_ids

BOS = ByteTokenizer.bos_id


@pytest.fixture(scope="module")
def ccq_gdn():
    """CCQ-Gated DeltaNet: short convs and CCQ statistics both travel in the carry."""
    return build("ccq-gdn-tiny", {"num_hidden_layers": 1, "kernel.chunk_size": 4, "vocab_size": 384})


@pytest.fixture(scope="module")
def transformer():
    return build("transformer-tiny", {"num_hidden_layers": 1, "vocab_size": 384})


def test_logits_and_streaming_steps_equal_the_full_forward_after_the_prefix(ccq_gdn):
    ids = token_ids((2, 13), seed=1)
    runner = ModelRunner(ccq_gdn, prefix=[BOS], batch_size=2)
    with_bos = np.concatenate([np.full((2, 1), BOS), ids], axis=1)
    full = ModelRunner(ccq_gdn).logits(with_bos)[:, 1:]  # no prefix, BOS written by hand
    logits = runner.logits(np.asarray(ids))
    assert logits.shape == (2, 13, 384) and float(jnp.max(jnp.abs(logits - full))) == 0.0
    carry, steps = runner.init_carry(2), []
    for start in range(0, 13, 5):  # chunks of 5, 5, 3 from the cache that has read BOS
        step_logits, carry = runner.step(np.asarray(ids[:, start:start + 5]), carry)
        steps.append(step_logits)
    assert rel_rms(jnp.concatenate(steps, axis=1), full) < 1e-5


@pytest.mark.parametrize("name", ["ccq_gdn", "transformer"])
def test_logits_of_many_lengths_compile_one_shape_per_bucket(name, request, caplog):
    """Widths 9 to 15 (+ the prefix: 10 to 16) share the bucket 16: one compilation of the forward, and each
    length's logits are the unpadded forward's (right padding changes no logit before it, for the recurrence and
    for causal softmax attention alike)."""
    model = request.getfixturevalue(name)
    runner = ModelRunner(model, prefix=[BOS])
    ids = token_ids((1, 15), seed=3)
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        for n in range(9, 16):
            logits = runner.logits(np.asarray(ids[:, :n]))
            with_bos = jnp.concatenate([jnp.full((1, 1), BOS), ids[:, :n]], axis=1)
            assert logits.shape == (1, n, 384) and rel_rms(logits, model(with_bos)[:, 1:]) < 1e-5
    assert sum("Compiling jit(_forward)" in r.getMessage() for r in caplog.records) == 1


def test_generate_pads_rows_and_width_without_changing_the_tokens(ccq_gdn):
    """The short prompt is padded to the long one's width (16) and the batch to 3 rows."""
    prompts = [[5, 9, 200, 7], list(range(1, 16))]
    got = ModelRunner(ccq_gdn, prefix=[BOS], batch_size=3).generate(prompts, 4)
    alone = generate(ccq_gdn, jnp.asarray([[BOS, *prompts[0]]], jnp.int32), 4)
    assert len(got) == 2 and got[0] == np.asarray(alone)[0].tolist() and len(got[1]) == 4
    with pytest.raises(ValueError, match=r"prompts: every prompt needs at least one token when the runner has no prefix"):
        ModelRunner(ccq_gdn).generate([[]], 2)


def test_layers_record_their_keys_only_inside_capture():
    model = build("ccq-gla-tiny", dict(num_hidden_layers=2, vocab_size=384))
    prompts = [[3, 4, 5, 6, 7], [8, 9, 10]]
    keys = ModelRunner(model, prefix=[BOS], batch_size=2).keys(prompts)
    assert [[k.shape for k in row] for row in keys] == [[(5, 4, 8)] * 2, [(3, 4, 8)] * 2]
    layer = model.layers[0]
    x = model.embeddings(jnp.asarray([[BOS, *prompts[1]]], jnp.int32))
    direct = split_heads(layer.attn.k_proj(layer.attn_norm(x)), 8)[0, 1:]
    assert rel_rms(keys[1][0], direct) < 1e-6
    model(jnp.asarray(prompts[:1], jnp.int32))  # a plain call records nothing on the module
    assert not jax.tree.leaves(nnx.state(model, nnx.Intermediate))
    with pytest.raises(ValueError, match=r"model: only linear-attention layers record their keys; this is a "
                                         r"'transformer' model"):
        ModelRunner(build("transformer-tiny", dict(num_hidden_layers=1))).keys([[1, 2]])
    with pytest.raises(ValueError, match=r"model: only linear-attention layers record their keys; this 'gdn' "
                                         r"hybrid has softmax attention on layers \[3\]"):
        ModelRunner(build("gdn-hybrid-tiny")).keys([[1, 2]])


def test_text_tokenizer_and_buckets():
    tok = TextTokenizer(ByteTokenizer())
    assert tok.encode("hé") == [104, 195, 169] and isinstance(tok.encode("a")[0], int)
    assert tok.decode([104, 257]) == "h" and tok.document_start == BOS and tok.eos_id == 257
    assert [bucket(n) for n in (1, 2, 3, 600, 1024, 1025, 3000)] == [1, 2, 4, 1024, 1024, 2048, 3072]
    with pytest.raises(ValueError, match=r"batch_size: expected an integer >= 1, got 0"):
        ModelRunner(None, batch_size=0)
