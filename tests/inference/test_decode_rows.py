"""Decoding with more rows than asked for (a GPU runs one row as two): the added rows change nothing returned."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.inference import decode, decode_rows, decode_step, generate, init_cache, prefill, sample_next
from tests.builders import build, MODEL_CASES as CASES, rel_rms, token_ids


def test_a_gpu_runs_a_single_row_as_two():
    assert decode_rows(1, "gpu") == 2
    assert [decode_rows(b, "gpu") for b in (2, 3, 16)] == [2, 3, 16]
    assert decode_rows(1, "cpu") == 1 and decode_rows(1, "tpu") == 1


def _prefilled(case, prompt_length=7):
    model = build(*CASES[case])
    logits, cache = prefill(model, token_ids((1, prompt_length), seed=9), init_cache(model, 1, 24))
    return model, jnp.argmax(logits[:, -1], axis=-1), cache


def _assert_same_cache(a, b):
    shapes = lambda c: jax.tree.map(lambda x: (x.shape, x.dtype), c)
    assert shapes(a) == shapes(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.issubdtype(x.dtype, jnp.floating):
            assert rel_rms(x, y) < 1e-5
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("case", ["transformer", "ccq-gdn"])  # KV cache with its scalar index; state, stats, convs
def test_a_step_of_added_rows_returns_the_single_row(case):
    model, token, cache = _prefilled(case)
    logits, after = decode_step(model, token, cache, rows=1)
    grown_logits, grown_after = decode_step(model, token, cache, rows=2)
    assert grown_logits.shape == logits.shape and rel_rms(grown_logits, logits) < 1e-5
    _assert_same_cache(grown_after, after)


@pytest.mark.parametrize("case", ["transformer", "ccq-gla"])
def test_a_sampled_loop_of_added_rows_returns_the_single_row(case):
    model, token, cache = _prefilled(case)
    kw = dict(temperature=1.0, rng=jax.random.key(4))
    alone, after = decode(model, token, cache, 6, rows=1, **kw)
    grown, grown_after = decode(model, token, cache, 6, rows=3, **kw)
    np.testing.assert_array_equal(grown, alone)
    _assert_same_cache(grown_after, after)


def test_added_rows_count_as_stopped():
    """The single row stops at its first token; the loop ends there although the added rows never emit eos."""
    model, token, cache = _prefilled("ccq-gla")
    free, _ = decode(model, token, cache, 5, rows=1)
    eos = int(free[0, 0])
    stopped, after = decode(model, token, cache, 5, eos_id=eos, rows=2)
    assert (np.asarray(stopped) == eos).all()
    _, one_step = decode(model, token, cache, 1, rows=1)
    _assert_same_cache(after, one_step)


def test_generate_of_added_rows_returns_the_single_row():
    model = build(*CASES["ccq-gdn"])
    prompt = token_ids((1, 6), seed=11)
    kw = dict(temperature=0.9, top_p=0.95, rng=jax.random.key(2))
    np.testing.assert_array_equal(generate(model, prompt, 6, rows=2, **kw), generate(model, prompt, 6, rows=1, **kw))


def test_a_rows_draw_does_not_depend_on_the_other_rows():
    logits = jax.random.normal(jax.random.key(0), (5, 64))
    key = jax.random.key(7)
    together = np.asarray(sample_next(logits, key, 1.0, 1.0))
    assert int(sample_next(logits[:1], key, 1.0, 1.0)[0]) == together[0]
    assert len(set(together.tolist())) > 1  # rows draw with different keys


def test_rows_must_cover_the_batch():
    model = build("gla-tiny")
    with pytest.raises(ValueError, match="rows: expected an integer >= 2, got 1"):
        decode_step(model, token_ids((2,)), init_cache(model, 2, 4), rows=1)
    with pytest.raises(ValueError, match="rows: expected an integer, got 1.5"):
        generate(model, token_ids((1, 3)), 2, rows=1.5)
