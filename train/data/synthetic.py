"""Seeded synthetic recall tasks, MQAR (Zoology) and needle retrieval, generated on the device.

`SyntheticBatches(config)` turns a `DataConfig` whose source is "mqar" or "needle" into a
pure function `batch(step) -> dict of int32 [batch_size, ...]` that runs inside the
jitted train step: no host work, no transfer, and under a mesh each device makes only its
own rows. Row r of step s is example `index = uniform(seed, s)[r]` of a pool of
`num_examples`, and example i is generated from `fold_in(key(seed), i)` alone, so a batch
depends on (seed, step) only: resuming at step s gives the very batches of an uninterrupted
run, on any mesh, with no iterator state.

Each row is one example in the packing format: `input_ids`, `targets` (the next input token,
0 after the last one, and the recalled value at scored positions), `loss_mask` (1 where a
recalled value is the target), `segment_ids` (1) and `positions` (0..T-1), all [T], and
`scored_positions` [P]: the P positions of `loss_mask`, a fixed number per task (MQAR's pairs,
the needle's value tokens), so the loss can apply the head there only (`train.loss`). Recall
accuracy is the accuracy of the argmax prediction on the scored positions (`recall.py`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from train.data.config import SYNTHETIC_SOURCES, DataConfig, MQARConfig, NeedleConfig


def _rows(tokens: jax.Array, last_target: jax.Array, scored: jax.Array) -> dict[str, jax.Array]:
    """One row: inputs = tokens, targets = tokens shifted left with `last_target` at the end, the loss on the
    distinct positions `scored` (int [P])."""
    targets = jnp.append(tokens[1:], last_target)
    seq_len = tokens.shape[0]
    scored = scored.astype(jnp.int32)
    return {"input_ids": tokens, "targets": targets, "loss_mask": jnp.zeros(seq_len, jnp.int32).at[scored].set(1),
            "segment_ids": jnp.ones(seq_len, jnp.int32), "positions": jnp.arange(seq_len, dtype=jnp.int32),
            "scored_positions": scored}


def _query_gaps(config: MQARConfig, key, space: int, n: int) -> jax.Array:
    """n distinct gaps in [0, space) from the power law p(g) ~ (g + 1)^(power_a - 1) (Gumbel top-k)."""
    gap_p = config.power_a * np.arange(1, space + 1, dtype=np.float64) ** (config.power_a - 1)
    return jax.random.choice(key, space, (n,), replace=False, p=jnp.asarray(gap_p / gap_p.sum(), jnp.float32))


def mqar_example(config: MQARConfig, seq_len: int, key: jax.Array, hubs=None) -> dict[str, jax.Array]:
    """Multi-query associative recall, following Zoology's `multiquery_ar` (see `MQARConfig`); with
    `config.hub_keys`, the hub-key variant (`hub_mqar_example`, `hubs` overriding its m).

    Layout for T = seq_len, P = num_kv_pairs: positions [0, 2P) hold k_1 v_1 ... k_P v_P;
    in the query region [2P, T) key k_j reappears at 2P + 2 g_j, with distinct gaps g_j drawn
    from the power law p(g) ~ (g + 1)^(power_a - 1) over [0, (T - 2P) // 2) (without
    replacement, by Gumbel top-k); its target is v_j.
    """
    config.check_seq_len(seq_len)
    if config.hub_keys:
        return hub_mqar_example(config, seq_len, key, config.hub_keys if hubs is None else hubs)
    half, pairs = config.vocab_size // 2, config.num_kv_pairs
    k_keys, k_values, k_gaps, k_fill = jax.random.split(key, 4)
    keys = jax.random.choice(k_keys, half - 1, (pairs,), replace=False) + 1
    values = jax.random.choice(k_values, config.vocab_size - half, (pairs,), replace=False) + half
    gaps = _query_gaps(config, k_gaps, (seq_len - 2 * pairs) // 2, pairs)
    queries = 2 * pairs + 2 * gaps
    tokens = jnp.zeros(seq_len, jnp.int32).at[0:2 * pairs:2].set(keys).at[1:2 * pairs:2].set(values)
    tokens = tokens.at[queries].set(keys)
    if config.random_non_queries:
        fill = jax.random.randint(k_fill, (seq_len,), 0, config.vocab_size, jnp.int32)
        tokens = jnp.where(tokens == 0, fill, tokens)
    row = _rows(tokens, jnp.int32(0), queries)
    row["targets"] = row["targets"].at[queries].set(values)
    return row


def hub_mqar_example(config: MQARConfig, seq_len: int, key: jax.Array, hubs) -> dict[str, jax.Array]:
    """MQAR with per-example hub keys (see `MQARConfig.hub_keys`); hubs: m, an int or a traced int32 scalar in
    [1, distractors], so that one compiled program can make every condition.

    N = num_needles needle keys and up to D = num_kv_pairs - N hub keys are distinct tokens of [1, vocab_size/2);
    distractor j (of D) takes hub j mod m; all P values are distinct tokens of [vocab_size/2, vocab_size). The P
    pairs fill [0, 2P) in a random order; in the query region [2P, T) needle i reappears at 2P + 2 g_i (gaps as
    in MQAR) with its value as the target, and only those N positions are scored. Other tokens are 0, or uniform
    random ids when `random_non_queries`. `needle_order="written"` sorts the needles' slots (needle i written
    before needle i + 1).
    """
    half, pairs, needles = config.vocab_size // 2, config.num_kv_pairs, config.num_needles
    k_keys, k_values, k_order, k_gaps, k_fill = jax.random.split(key, 5)
    distinct = jax.random.choice(k_keys, half - 1, (pairs,), replace=False) + 1
    hub_of = jnp.arange(pairs - needles) % jnp.asarray(hubs, jnp.int32)
    pair_keys = jnp.concatenate([distinct[:needles], distinct[needles:][hub_of]])
    values = jax.random.choice(k_values, config.vocab_size - half, (pairs,), replace=False) + half
    slot = jax.random.permutation(k_order, pairs)  # pair i sits at positions 2 slot_i, 2 slot_i + 1
    if config.needle_order == "written":  # needle i before needle i + 1, the distractors where they fell
        slot = jnp.concatenate([jnp.sort(slot[:needles]), slot[needles:]])
    gaps = _query_gaps(config, k_gaps, (seq_len - 2 * pairs) // 2, needles)
    queries = 2 * pairs + 2 * gaps
    tokens = jnp.zeros(seq_len, jnp.int32).at[2 * slot].set(pair_keys).at[2 * slot + 1].set(values)
    tokens = tokens.at[queries].set(pair_keys[:needles])
    if config.random_non_queries:
        fill = jax.random.randint(k_fill, (seq_len,), 0, config.vocab_size, jnp.int32)
        tokens = jnp.where(tokens == 0, fill, tokens)
    row = _rows(tokens, jnp.int32(0), queries)
    row["targets"] = row["targets"].at[queries].set(values[:needles])
    return row


def needle_example(config: NeedleConfig, seq_len: int, key: jax.Array) -> dict[str, jax.Array]:
    """One key-value needle in uniform filler, queried at the end (see `NeedleConfig`).

    `filler[:cut] | NEEDLE key value | filler[cut:] | QUERY key value[:-1]`, with the cut at
    `round(depth * len(filler))` (depth uniform in [0, 1) per example when `depth` is None).
    """
    config.check_seq_len(seq_len)
    n_key, n_value = config.key_len, config.value_len
    n_filler = seq_len - 2 * (n_key + n_value) - 1
    k_key, k_value, k_filler, k_depth = jax.random.split(key, 4)
    content = lambda k, n: jax.random.randint(k, (n,), config.FIRST_CONTENT_ID, config.vocab_size, jnp.int32)
    needle_key, value, filler = content(k_key, n_key), content(k_value, n_value), content(k_filler, n_filler)
    depth = jax.random.uniform(k_depth) if config.depth is None else jnp.float32(config.depth)
    cut = jnp.round(depth * n_filler).astype(jnp.int32)
    # the sequence without its filler, then the filler spliced in at `cut`
    marks = jnp.concatenate([jnp.array([config.NEEDLE_ID], jnp.int32), needle_key, value,
                             jnp.array([config.QUERY_ID], jnp.int32), needle_key, value[:-1]])
    t = jnp.arange(seq_len)
    needle_len = 1 + n_key + n_value
    in_needle = (t >= cut) & (t < cut + needle_len)
    after = t >= n_filler + needle_len  # the query and its answer
    filler_index = jnp.clip(jnp.where(t < cut, t, t - needle_len), 0, n_filler - 1)
    mark_index = jnp.clip(jnp.where(after, t - n_filler, t - cut), 0, marks.shape[0] - 1)
    tokens = jnp.where(in_needle | after, marks[mark_index], filler[filler_index])
    return _rows(tokens, value[-1], jnp.arange(seq_len - n_value, seq_len))


_EXAMPLES = {"mqar": mqar_example, "needle": needle_example}


class SyntheticBatches:
    """Global batches of a synthetic `DataConfig`, generated by a pure, jittable function of the step."""

    def __init__(self, config: DataConfig):
        if config.source not in SYNTHETIC_SOURCES:
            raise ValueError(f"source: SyntheticBatches needs one of {SYNTHETIC_SOURCES}, got {config.source!r}")
        self.config = config
        self.task = getattr(config, config.source)
        self.vocab_size = self.task.vocab_size
        self._example = functools.partial(_EXAMPLES[config.source], self.task, config.seq_len)

    def examples(self, indices: jax.Array, seed=None, hubs=None) -> dict[str, jax.Array]:
        """The examples with these indices (int [n]) of the pool, as [n, seq_len] rows. seed (None: the config's)
        and hubs (hub-key MQAR's m; None: the config's) may be traced, so that `jax.vmap` makes the pools of many
        seeds and conditions in one program."""
        if hubs is not None and not getattr(self.task, "hub_keys", 0):
            raise ValueError("hubs: only for hub-key MQAR (mqar.hub_keys >= 1)")
        example = self._example if hubs is None else functools.partial(self._example, hubs=hubs)
        examples_key = jax.random.fold_in(jax.random.key(self.config.seed if seed is None else seed), 0)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(examples_key, indices)
        return jax.vmap(example)(keys)

    def indices(self, step: jax.Array, seed=None) -> jax.Array:
        """The pool indices of step `step`'s rows: uniform draws from [0, num_examples)."""
        seed = self.config.seed if seed is None else seed
        sample_key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 1), step)
        return jax.random.randint(sample_key, (self.config.batch_size,), 0, self.task.num_examples)

    def batch(self, step: jax.Array, seed=None, hubs=None) -> dict[str, jax.Array]:
        """The global batch of `step` (an int scalar, traced or not): int32 [batch_size, ...] arrays."""
        return self.examples(self.indices(step, seed), seed, hubs)
