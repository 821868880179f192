"""generate: per-row prompt lengths, sampling (top-k, top-p), stopping at EOS per row, a model split once,
argument checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.inference import SplitModel, decode, generate, graph_key, init_cache, prefill, sample_next
from ccq_jax.inference import split_model
from tests.builders import build, MODEL_CASES as CASES, token_ids


@pytest.mark.parametrize("case", ["transformer", "ccq-gdn"])  # KV cache and RoPE; recurrent state, stats, conv tails
def test_rows_of_different_lengths_decode_as_if_alone(case):
    model = build(*CASES[case])
    prompts = token_ids((2, 9), seed=3)
    lengths = [9, 5]
    padded = prompts.at[1, 5:].set(77)  # whatever follows a prompt is ignored
    batch = generate(model, padded, 6, prompt_lengths=jnp.asarray(lengths))
    for row, n in enumerate(lengths):
        alone = generate(model, prompts[row:row + 1, :n], 6)
        np.testing.assert_array_equal(batch[row], alone[0])


def test_generate_is_prefill_then_a_decode_loop():
    model = build("transformer-tiny")
    prompt = token_ids((2, 7), seed=6)
    logits, cache = prefill(model, prompt, init_cache(model, 2, 12))
    first = jnp.argmax(logits[:, -1], axis=-1)
    rest, cache = decode(model, first, cache, 4)
    np.testing.assert_array_equal(jnp.concatenate([first[:, None], rest], axis=1), generate(model, prompt, 5))
    assert int(cache[0].index) == 11  # the prompt, the first token and three of the four new ones


def test_sampling_with_bf16_compute_is_reproducible():
    name, overrides = CASES["ccq-gdn"]
    model = build(name, dict(overrides, dtype="bfloat16"))
    prompts = token_ids((2, 6), seed=4)
    kw = dict(temperature=0.8, top_p=0.9, prompt_lengths=jnp.asarray([6, 2]))
    a = generate(model, prompts, 5, rng=jax.random.key(1), **kw)
    b = generate(model, prompts, 5, rng=jax.random.key(1), **kw)
    assert a.shape == (2, 5) and a.dtype == jnp.int32
    np.testing.assert_array_equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 256


def test_top_p_keeps_the_smallest_nucleus():
    probs = jnp.asarray([[0.6, 0.25, 0.1, 0.05]] * 4000)
    logits = jnp.log(probs)
    key = jax.random.key(0)
    np.testing.assert_array_equal(sample_next(logits, key, 1.0, 0.5), 0)  # 0.6 alone reaches 0.5
    counts = np.bincount(np.asarray(sample_next(logits, key, 1.0, 0.8)), minlength=4)
    assert counts[2:].sum() == 0 and abs(counts[0] / 4000 - 0.6 / 0.85) < 0.03  # renormalised over {0, 1}
    counts = np.bincount(np.asarray(sample_next(logits, key, 1.0, 1.0)), minlength=4)
    assert np.abs(counts / 4000 - probs[0]).max() < 0.03
    np.testing.assert_array_equal(sample_next(logits, key, 0.0, 1.0), 0)  # greedy


BAD = [
    (dict(prompt_ids=jnp.zeros((2, 3))), r"prompt_ids: expected integer ids \[B, P\] with P >= 1, got float32"),
    (dict(max_new_tokens=0), "max_new_tokens: expected an integer >= 1, got 0"),
    (dict(temperature=-1.0), r"temperature: expected a value in \[0, inf\], got -1.0"),
    (dict(top_p=0.0), r"top_p: expected a value in \(0, 1\], got 0.0"),
    (dict(top_k=-1), "top_k: expected an integer >= 0, got -1"),
    (dict(eos_id=1.5), "eos_id: expected an integer, got 1.5"),
    (dict(temperature=0.5), "rng: a jax.random key is required when temperature > 0"),
    (dict(prompt_lengths=jnp.asarray([3, 0])), r"prompt_lengths: expected values in \[1, P=3\], got \[3, 0\]"),
    (dict(prompt_lengths=jnp.asarray([3])), r"prompt_lengths: expected integers \[B=2\], got int32 \(1,\)"),
    (dict(prompt_lengths=[3.0, 1.0]), r"prompt_lengths: expected integers \[B=2\], got float32 \(2,\)"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_generate_checks_its_arguments(overrides, message):
    model = build("gla-tiny")
    kw = dict(prompt_ids=token_ids((2, 3)), max_new_tokens=2)
    kw.update(overrides)
    with pytest.raises(ValueError, match=message):
        generate(model, **kw)


def test_token_ids_outside_the_vocabulary_are_named():
    """generate returned zeros for a row with id = vocab_size; the padding after a shorter prompt is never read."""
    model = build("gla-tiny")
    vocab = model.config.vocab_size
    prompt = token_ids((2, 3)).at[1, 2].set(vocab)
    with pytest.raises(ValueError, match=rf"prompt_ids: expected values in \[0, {vocab - 1}\] \(token ids of a "
                                         rf"vocabulary of vocab_size={vocab}\); found {vocab}"):
        generate(model, prompt, 2)
    assert generate(model, prompt.at[1, 2].set(-1), 2, prompt_lengths=jnp.asarray([3, 2])).shape == (2, 2)
    with pytest.raises(ValueError, match=r"tokens: expected values in \[0, .*found -1"):
        decode(model, jnp.asarray([0, -1]), init_cache(model, 2, 4), 2)


def test_decode_checks_its_arguments():
    model = build("gla-tiny")
    cache = init_cache(model, 2, 4)
    with pytest.raises(ValueError, match="num_tokens: expected an integer >= 1, got 0"):
        decode(model, token_ids((2,)), cache, 0)
    with pytest.raises(ValueError, match=r"tokens: expected integer token ids \[B\], got int32 \(2, 2\)"):
        decode(model, token_ids((2, 2)), cache, 3)


@pytest.mark.parametrize("case", ["transformer", "ccq-gdn"])
def test_rows_stop_at_eos_and_the_rest_is_unchanged(case):
    model = build(*CASES[case])
    prompts = token_ids((3, 6), seed=8)
    free = np.asarray(generate(model, prompts, 8))
    eos = int(free[1, 2])  # row 1 emits it third (and may emit it earlier or in another row too)
    stopped = np.asarray(generate(model, prompts, 8, eos_id=eos))
    for row in range(3):
        hits = np.flatnonzero(free[row] == eos)
        end = hits[0] + 1 if hits.size else 8
        np.testing.assert_array_equal(stopped[row, :end], free[row, :end])  # as if not stopped, up to its EOS
        assert (stopped[row, end:] == eos).all()


def test_decoding_ends_once_every_row_has_stopped():
    model = build(*CASES["ccq-gla"])
    prompt = jnp.tile(token_ids((1, 5), seed=2), (2, 1))  # two equal rows: both stop at their first token
    logits, cache = prefill(model, prompt, init_cache(model, 2, 16))
    first = jnp.argmax(logits[:, -1], axis=-1)
    free, _ = decode(model, first, cache, 6)
    eos = int(free[0, 0])
    tokens, after = decode(model, first, cache, 6, eos_id=eos)
    assert (np.asarray(tokens) == eos).all()
    _, one_step = decode(model, first, cache, 1)
    for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(one_step)):  # the loop ran one step, not six
        np.testing.assert_array_equal(a, b)


def test_top_k_keeps_the_k_most_likely():
    logits = jnp.log(jnp.asarray([[0.1, 0.4, 0.2, 0.3]] * 4000))
    counts = np.bincount(np.asarray(sample_next(logits, jax.random.key(3), 1.0, 1.0, top_k=2)), minlength=4)
    assert counts[[0, 2]].sum() == 0 and abs(counts[1] / 4000 - 0.4 / 0.7) < 0.03
    np.testing.assert_array_equal(sample_next(logits, jax.random.key(3), 1.0, 1.0, top_k=1), 1)
    counts = np.bincount(np.asarray(sample_next(logits, jax.random.key(3), 1.0, 0.5, top_k=3)), minlength=4)
    assert counts[[0, 2]].sum() == 0  # top-3 {1, 3, 2}, then the nucleus 0.4 + 0.3 >= 0.5 of it


@pytest.mark.parametrize("case", ["transformer", "ccq-gla"])
def test_a_model_split_once_serves_as_the_model(case):
    model = build(*CASES[case])
    served = split_model(model)
    assert split_model(served) is served
    prompts = token_ids((2, 7), seed=9)
    np.testing.assert_array_equal(generate(served, prompts, 5), generate(model, prompts, 5))
    a, cache_a = prefill(served, prompts, init_cache(served, 2, 12))
    b, cache_b = prefill(model, prompts, init_cache(model, 2, 12))
    np.testing.assert_array_equal(a, b)
    for x, y in zip(jax.tree.leaves(cache_a), jax.tree.leaves(cache_b)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(decode(served, a[:, -1].argmax(-1), cache_a, 3)[0],
                                  decode(model, b[:, -1].argmax(-1), cache_b, 3)[0])


def test_a_split_model_carries_its_graph_hashed_once():
    """The compiled functions take the graph as a static argument: its hash is computed once, at the split."""
    model = build("gla-tiny")
    served = split_model(model)
    assert graph_key(served) is served.key and served.key.graphdef is served.graphdef
    again = split_model(model)  # another split of the same model: an equal graph, so the compiled functions match
    assert graph_key(again) == served.key and hash(graph_key(again)) == hash(served.key)
    unkeyed = SplitModel(served.graphdef, served.state)  # built by hand: keyed on each call, equal all the same
    assert unkeyed.key is None and graph_key(unkeyed) == served.key
    assert graph_key(split_model(build("gla-tiny", {"num_hidden_layers": 3}))) != served.key
    calls = []
    jax.jit(lambda s: calls.append(s.key) or s.state)(served)  # a SplitModel passes through jit (its key is static)
    assert calls == [served.key]


def test_split_model_refuses_what_is_not_a_model():
    with pytest.raises(ValueError, match="model: expected an nnx.Module \\(a CausalLM\\) or a SplitModel, got dict"):
        split_model({"params": 1})


def test_prefill_of_the_last_position_only_is_the_last_row_of_the_full_logits():
    model = build(*CASES["ccq-gdn"])
    prompt = token_ids((2, 9), seed=11)
    full, cache_full = prefill(model, prompt, init_cache(model, 2, 9))
    last, cache_last = prefill(model, prompt, init_cache(model, 2, 9), last_only=True)
    assert last.shape == (2, 1, full.shape[-1])
    np.testing.assert_allclose(last[:, 0], full[:, -1], rtol=1e-6, atol=1e-6)
    for x, y in zip(jax.tree.leaves(cache_last), jax.tree.leaves(cache_full)):
        np.testing.assert_array_equal(x, y)
