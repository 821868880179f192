"""MQAR and needle generation: deterministic, well-formed; recall accuracy from logits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from train.data import MQARConfig, NeedleConfig, recall_accuracy, recall_counts
from train.data.synthetic import MQARSource, NeedleSource

T = 64


@pytest.mark.parametrize("random_non_queries", [True, False])
def test_mqar_examples_are_well_formed(random_non_queries):
    config = MQARConfig(vocab_size=128, num_kv_pairs=6, random_non_queries=random_non_queries, num_examples=50)
    source = MQARSource(config, seq_len=T, seed=1)
    half, pairs = 64, 6
    for i in range(len(source)):
        ex = source[i]
        assert all(v.shape == (T,) and v.dtype == np.int32 for v in ex.values())
        x, y, m = ex["inputs"], ex["targets"], ex["loss_mask"]
        keys, values = x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and ((1 <= keys) & (keys < half)).all()
        assert len(set(values)) == pairs and ((half <= values) & (values < 128)).all()
        (queries,) = np.nonzero(m)
        assert len(queries) == pairs and ((queries - 2 * pairs) % 2 == 0).all() and queries.min() >= 2 * pairs
        answer = dict(zip(keys, values))
        assert sorted(x[queries]) == sorted(keys)
        assert all(y[q] == answer[x[q]] for q in queries)
        unscored = np.setdiff1d(np.arange(T - 1), queries)
        np.testing.assert_array_equal(y[unscored], x[unscored + 1])
        assert ((0 <= x) & (x < 128)).all()
        filler = np.setdiff1d(np.arange(2 * pairs, T), queries)
        assert (x[filler] == 0).all() != random_non_queries


def test_mqar_is_deterministic_and_seeded():
    config = MQARConfig(vocab_size=256, num_kv_pairs=8)
    a, b = MQARSource(config, seq_len=T, seed=5), MQARSource(config, seq_len=T, seed=5)
    for i in (0, 7, 99_999):
        for key in a[i]:
            np.testing.assert_array_equal(a[i][key], b[i][key])
    assert not np.array_equal(a[3]["inputs"], a[4]["inputs"])
    assert not np.array_equal(a[3]["inputs"], MQARSource(config, seq_len=T, seed=6)[3]["inputs"])


def test_mqar_power_law_puts_queries_early():
    gaps = {}
    for power_a in (0.01, 1.0):
        source = MQARSource(MQARConfig(vocab_size=256, num_kv_pairs=4, power_a=power_a), seq_len=256, seed=0)
        gaps[power_a] = np.mean([np.nonzero(source[i]["loss_mask"])[0].mean() for i in range(200)])
    assert gaps[0.01] < gaps[1.0] - 20  # uniform gaps: mean position ~ 8 + 124; power law: much earlier


@pytest.mark.parametrize("depth", [None, 0.0, 0.5, 1.0])
def test_needle_examples_are_well_formed(depth):
    config = NeedleConfig(vocab_size=50, key_len=3, value_len=2, depth=depth)
    source = NeedleSource(config, seq_len=40, seed=2)
    for i in range(30):
        ex = source[i]
        x, y, m = ex["inputs"], ex["targets"], ex["loss_mask"]
        (needle,) = np.nonzero(x == 1)
        (query,) = np.nonzero(x == 2)
        assert len(needle) == 1 and len(query) == 1 and query[0] == 40 - 3 - 2
        key, value = x[needle[0] + 1 : needle[0] + 4], x[needle[0] + 4 : needle[0] + 6]
        np.testing.assert_array_equal(x[query[0] + 1 : query[0] + 4], key)
        np.testing.assert_array_equal(m, [0] * 38 + [1, 1])
        np.testing.assert_array_equal(y[-2:], value)
        np.testing.assert_array_equal(y[:-1], x[1:])
        content = np.delete(x, [needle[0], query[0]])
        assert ((3 <= content) & (content < 50)).all()
        if depth is not None:
            assert needle[0] == round(depth * (40 - 11))
    assert not np.array_equal(source[0]["inputs"], source[1]["inputs"])
    np.testing.assert_array_equal(source[5]["inputs"], NeedleSource(config, seq_len=40, seed=2)[5]["inputs"])


def test_recall_accuracy_from_logits():
    rng = np.random.default_rng(0)
    targets = rng.integers(0, 10, size=(2, 5))
    mask = np.array([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]])
    batch = {"targets": jnp.asarray(targets), "loss_mask": jnp.asarray(mask)}
    logits = jax.nn.one_hot(targets, 10)  # perfect everywhere
    assert float(recall_accuracy(logits, batch)) == 1.0
    wrong = logits.at[0, 1].set(jax.nn.one_hot((targets[0, 1] + 1) % 10, 10))  # one scored miss
    wrong = wrong.at[0, 0].set(jax.nn.one_hot((targets[0, 0] + 1) % 10, 10))  # an unscored miss
    correct, scored = jax.jit(recall_counts)(wrong, batch)
    assert (float(correct), float(scored)) == (3.0, 4.0)
    assert float(recall_accuracy(wrong, {"targets": batch["targets"], "loss_mask": jnp.zeros((2, 5))})) == 0.0
    message = r"logits: expected shape \[B, T, E\] with \[B, T\] = targets.shape \(2, 5\), got \(2, 4, 10\)"
    with pytest.raises(ValueError, match=message):
        recall_counts(logits[:, :4], batch)
