"""MQAR and needle generation on the device: well-formed, a function of (seed, index); recall accuracy from logits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from train.data import DataConfig, recall_accuracy, recall_counts
from train.data.synthetic import SyntheticBatches

T = 64


def _examples(source, config, seq_len, seed, n):
    data = DataConfig.from_dict({"source": source, "seq_len": seq_len, "batch_size": n, "seed": seed, source: config})
    return jax.device_get(SyntheticBatches(data).examples(jnp.arange(n)))


@pytest.mark.parametrize("random_non_queries", [True, False])
def test_mqar_examples_are_well_formed(random_non_queries):
    pairs, half = 6, 64
    rows = _examples("mqar", {"vocab_size": 128, "num_kv_pairs": pairs, "random_non_queries": random_non_queries},
                     T, 1, 50)
    scored_positions = rows.pop("scored_positions")
    assert all(v.shape == (50, T) and v.dtype == np.int32 for v in rows.values())
    assert scored_positions.shape == (50, pairs) and scored_positions.dtype == np.int32
    for i in range(50):
        x, y, m = rows["input_ids"][i], rows["targets"][i], rows["loss_mask"][i]
        keys, values = x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and ((1 <= keys) & (keys < half)).all()
        assert len(set(values)) == pairs and ((half <= values) & (values < 128)).all()
        (queries,) = np.nonzero(m)
        np.testing.assert_array_equal(np.sort(scored_positions[i]), queries)
        assert len(queries) == pairs and ((queries - 2 * pairs) % 2 == 0).all() and queries.min() >= 2 * pairs
        answer = dict(zip(keys, values))
        assert sorted(x[queries]) == sorted(keys)
        assert all(y[q] == answer[x[q]] for q in queries)
        unscored = np.setdiff1d(np.arange(T - 1), queries)
        np.testing.assert_array_equal(y[unscored], x[unscored + 1])
        assert ((0 <= x) & (x < 128)).all()
        filler = np.setdiff1d(np.arange(2 * pairs, T), queries)
        assert (x[filler] == 0).all() != random_non_queries
    np.testing.assert_array_equal(rows["segment_ids"], 1)
    np.testing.assert_array_equal(rows["positions"], np.broadcast_to(np.arange(T), (50, T)))


def test_examples_depend_on_seed_and_index_only():
    config = {"vocab_size": 256, "num_kv_pairs": 8}
    a = _examples("mqar", config, T, 5, 8)["input_ids"]
    np.testing.assert_array_equal(a, _examples("mqar", config, T, 5, 8)["input_ids"])
    assert len({row.tobytes() for row in a}) == 8
    assert not np.array_equal(a, _examples("mqar", config, T, 6, 8)["input_ids"])
    data = DataConfig.from_dict({"source": "mqar", "seq_len": T, "batch_size": 4, "seed": 5, "mqar": config})
    batches = SyntheticBatches(data)
    one = jax.device_get(batches.batch(jnp.int32(3)))
    np.testing.assert_array_equal(one["input_ids"], jax.device_get(jax.jit(batches.batch)(3))["input_ids"])
    index = jax.device_get(batches.indices(jnp.int32(3)))
    np.testing.assert_array_equal(one["input_ids"], jax.device_get(batches.examples(index))["input_ids"])
    assert not np.array_equal(one["input_ids"], jax.device_get(batches.batch(jnp.int32(4)))["input_ids"])


def test_only_synthetic_sources_are_generated(tmp_path):
    text = DataConfig.from_dict({"source": "text", "paths": [str(tmp_path)]})
    with pytest.raises(ValueError, match=r"source: SyntheticBatches needs one of \('mqar', 'needle'\), got 'text'"):
        SyntheticBatches(text)


def test_rows_are_drawn_uniformly_from_the_pool():
    data = DataConfig.from_dict({"source": "mqar", "seq_len": T, "batch_size": 256,
                                 "mqar": {"vocab_size": 64, "num_kv_pairs": 4, "num_examples": 16}})
    batches = SyntheticBatches(data)
    index = np.concatenate([jax.device_get(batches.indices(jnp.int32(s))) for s in range(8)])
    counts = np.bincount(index, minlength=16)
    assert index.min() >= 0 and index.max() < 16
    assert counts.min() > 0.7 * 128 and counts.max() < 1.3 * 128  # 2048 draws, 128 expected per example


def test_mqar_power_law_puts_queries_early():
    gaps = {}
    for power_a in (0.01, 1.0):
        rows = _examples("mqar", {"vocab_size": 256, "num_kv_pairs": 4, "power_a": power_a}, 256, 0, 200)
        gaps[power_a] = np.mean([np.nonzero(m)[0].mean() for m in rows["loss_mask"]])
    assert gaps[0.01] < gaps[1.0] - 20  # uniform gaps: mean position ~ 8 + 124; power law: much earlier


@pytest.mark.parametrize("depth", [None, 0.0, 0.5, 1.0])
def test_needle_examples_are_well_formed(depth):
    rows = _examples("needle", {"vocab_size": 50, "key_len": 3, "value_len": 2, "depth": depth}, 40, 2, 30)
    needles = []
    for i in range(30):
        x, y, m = rows["input_ids"][i], rows["targets"][i], rows["loss_mask"][i]
        (needle,) = np.nonzero(x == 1)
        (query,) = np.nonzero(x == 2)
        assert len(needle) == 1 and len(query) == 1 and query[0] == 40 - 3 - 2
        key, value = x[needle[0] + 1 : needle[0] + 4], x[needle[0] + 4 : needle[0] + 6]
        np.testing.assert_array_equal(x[query[0] + 1 : query[0] + 4], key)
        np.testing.assert_array_equal(m, [0] * 38 + [1, 1])
        np.testing.assert_array_equal(rows["scored_positions"][i], [38, 39])
        np.testing.assert_array_equal(y[-2:], value)
        np.testing.assert_array_equal(y[:-1], x[1:])
        content = np.delete(x, [needle[0], query[0]])
        assert ((3 <= content) & (content < 50)).all()
        if depth is not None:
            assert needle[0] == round(depth * (40 - 11))
        needles.append(needle[0])
    assert len(set(needles)) > (10 if depth is None else 0)
    assert not np.array_equal(rows["input_ids"][0], rows["input_ids"][1])


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
