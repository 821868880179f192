"""Seeded synthetic recall tasks: MQAR (Zoology) and needle retrieval, as random-access sources.

Example i is generated from `np.random.default_rng((seed, i))` alone, so any example can be
produced in any order, on any host, and is the same every time. Each example is a dict of
int32 [seq_len] arrays `inputs`, `targets`, `loss_mask` (the packing format, one full row):
`loss_mask` marks the positions whose target is a recalled value, elsewhere the target is
the next input token (0 after the last one) and is not scored. Recall accuracy is the
accuracy of the argmax prediction on the scored positions (`recall.py`).
"""

from __future__ import annotations

import numpy as np

from train.data.config import MQARConfig, NeedleConfig


def _example(tokens: np.ndarray, last_target: int, scored: np.ndarray) -> dict[str, np.ndarray]:
    """inputs = tokens, targets = tokens shifted left with `last_target` at the end, loss_mask = scored."""
    targets = np.append(tokens[1:], last_target).astype(np.int32)
    return {"inputs": tokens.astype(np.int32), "targets": targets, "loss_mask": scored.astype(np.int32)}


class MQARSource:
    """Multi-query associative recall, following Zoology's `multiquery_ar` (see `MQARConfig`).

    Layout for T = seq_len, P = num_kv_pairs: positions [0, 2P) hold k_1 v_1 ... k_P v_P;
    in the query region [2P, T) key k_j reappears at 2P + 2 g_j, with distinct gaps g_j drawn
    from the power law p(g) ~ (g + 1)^(power_a - 1) over [0, (T - 2P) // 2); its target is v_j.
    """

    def __init__(self, config: MQARConfig, *, seq_len: int, seed: int):
        config.check_seq_len(seq_len)
        self.config, self.seq_len, self.seed = config, seq_len, seed
        space = (seq_len - 2 * config.num_kv_pairs) // 2
        p = config.power_a * np.arange(1, space + 1, dtype=np.float64) ** (config.power_a - 1)
        self._gap_p = p / p.sum()

    def __len__(self) -> int:
        return self.config.num_examples

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        c, rng = self.config, np.random.default_rng((self.seed, int(index)))
        half, pairs = c.vocab_size // 2, c.num_kv_pairs
        keys = rng.choice(half - 1, size=pairs, replace=False) + 1
        values = rng.choice(c.vocab_size - half, size=pairs, replace=False) + half
        gaps = rng.choice(len(self._gap_p), size=pairs, replace=False, p=self._gap_p)
        tokens = np.zeros(self.seq_len, np.int64)
        tokens[0 : 2 * pairs : 2] = keys
        tokens[1 : 2 * pairs : 2] = values
        queries = 2 * pairs + 2 * gaps
        tokens[queries] = keys
        if c.random_non_queries:
            fill = rng.integers(0, c.vocab_size, size=self.seq_len)
            tokens = np.where(tokens == 0, fill, tokens)
        example = _example(tokens, 0, np.zeros(self.seq_len))
        example["targets"][queries] = values
        example["loss_mask"][queries] = 1
        return example


class NeedleSource:
    """One key-value needle in uniform filler, queried at the end (see `NeedleConfig`)."""

    def __init__(self, config: NeedleConfig, *, seq_len: int, seed: int):
        config.check_seq_len(seq_len)
        self.config, self.seq_len, self.seed = config, seq_len, seed

    def __len__(self) -> int:
        return self.config.num_examples

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        c, rng = self.config, np.random.default_rng((self.seed, int(index)))
        content = lambda n: rng.integers(c.FIRST_CONTENT_ID, c.vocab_size, size=n)
        key, value = content(c.key_len), content(c.value_len)
        filler = content(self.seq_len - 2 * (c.key_len + c.value_len) - 1)
        depth = rng.random() if c.depth is None else c.depth
        cut = int(round(depth * len(filler)))
        tokens = np.concatenate(
            [filler[:cut], [c.NEEDLE_ID], key, value, filler[cut:], [c.QUERY_ID], key, value[:-1]]
        )
        scored = np.zeros(self.seq_len)
        scored[self.seq_len - c.value_len :] = 1
        return _example(tokens, value[-1], scored)
