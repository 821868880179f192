"""Hub-key MQAR (train/data/synthetic.py `hub_mqar_example`, study/hub_mqar.py): the layout the study's
predictions rest on, one compiled program for every condition, the refusals, and the table from rows."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from study import hub_mqar
from train.data.config import DataConfig, MQARConfig
from train.data.synthetic import SyntheticBatches

PAIRS, NEEDLES, T = 24, 4, 64


def _batches(hub_keys=1, random_non_queries=False, needle_order="random"):
    task = MQARConfig(vocab_size=256, num_kv_pairs=PAIRS, num_needles=NEEDLES, hub_keys=hub_keys,
                      random_non_queries=random_non_queries, num_examples=1000, needle_order=needle_order)
    return SyntheticBatches(DataConfig(source="mqar", seq_len=T, batch_size=8, mqar=task))


@pytest.mark.parametrize("hubs", [1, 2, 4, PAIRS - NEEDLES])
def test_the_distractors_share_m_hub_keys_and_only_the_needles_are_scored(hubs):
    batch = jax.tree.map(np.asarray, jax.jit(lambda s, m: _batches().batch(s, hubs=m))(jnp.int32(3), hubs))
    for row in range(8):
        tokens, scored = batch["input_ids"][row], batch["scored_positions"][row]
        keys, values = tokens[0:2 * PAIRS:2], tokens[1:2 * PAIRS:2]
        queried = tokens[scored]
        assert len(set(keys)) == NEEDLES + hubs
        assert len(set(values)) == PAIRS and np.all(values >= 128) and np.all((keys >= 1) & (keys < 128))
        assert batch["loss_mask"][row].sum() == NEEDLES and np.all(scored >= 2 * PAIRS)
        for key, position in zip(queried, scored):
            (where,) = np.nonzero(keys == key)
            assert len(where) == 1  # a needle's key appears once among the pairs
            assert batch["targets"][row, position] == values[where[0]]
        others = np.setdiff1d(keys, queried)
        counts = [np.sum(keys == hub) for hub in others]
        assert len(others) == hubs and max(counts) - min(counts) <= 1  # distractor j takes hub j mod m


def test_every_condition_shares_its_needles_values_and_query_positions():
    batches = _batches()
    rows = [jax.tree.map(np.asarray, batches.batch(jnp.int32(0), hubs=m)) for m in (1, PAIRS - NEEDLES)]
    np.testing.assert_array_equal(rows[0]["scored_positions"], rows[1]["scored_positions"])
    np.testing.assert_array_equal(rows[0]["targets"] * rows[0]["loss_mask"], rows[1]["targets"] * rows[1]["loss_mask"])
    assert not np.array_equal(rows[0]["input_ids"], rows[1]["input_ids"])


def _needle_slots(batch, row):
    """The pair slots of the needles of `row`, in needle order (the order MQAR's gaps were drawn in)."""
    tokens = np.asarray(batch["input_ids"][row])
    keys = list(tokens[0:2 * PAIRS:2])
    return [keys.index(tokens[p]) for p in np.asarray(batch["scored_positions"][row])]


def test_written_needle_order_keeps_the_needles_in_index_order_and_changes_nothing_else():
    """needle_order="written": needle i is written before needle i + 1 (Zoology's MQAR writes pairs in order); the
    same keys, values, queries and distractor slots as "random", only the needles' slots permuted among themselves."""
    random, written = (jax.tree.map(np.asarray, _batches(needle_order=o).batch(jnp.int32(5), hubs=2))
                       for o in ("random", "written"))
    shuffled = 0
    for row in range(8):
        slots_r, slots_w = _needle_slots(random, row), _needle_slots(written, row)
        assert slots_w == sorted(slots_w) and sorted(slots_r) == slots_w
        shuffled += slots_r != sorted(slots_r)
        np.testing.assert_array_equal(random["scored_positions"][row], written["scored_positions"][row])
        np.testing.assert_array_equal(random["targets"][row][random["scored_positions"][row]],
                                      written["targets"][row][written["scored_positions"][row]])
        distractor = np.ones(PAIRS, bool)
        distractor[slots_w] = False
        np.testing.assert_array_equal(random["input_ids"][row][:2 * PAIRS].reshape(PAIRS, 2)[distractor],
                                      written["input_ids"][row][:2 * PAIRS].reshape(PAIRS, 2)[distractor])
    assert shuffled >= 6  # "random" does shuffle them
    with pytest.raises(ValueError, match=r"mqar.needle_order: expected one of \['random', 'written'\], got 'sorted'"):
        MQARConfig(num_kv_pairs=PAIRS, num_needles=NEEDLES, hub_keys=1, needle_order="sorted")


def test_the_config_decides_m_and_bad_values_are_refused_by_name():
    batch = _batches(hub_keys=2).batch(jnp.int32(0))
    keys = np.asarray(batch["input_ids"][0, 0:2 * PAIRS:2])
    assert len(set(keys)) == NEEDLES + 2
    with pytest.raises(ValueError, match=r"mqar.hub_keys: at most the 20 distractor pairs"):
        MQARConfig(num_kv_pairs=PAIRS, num_needles=NEEDLES, hub_keys=21)
    with pytest.raises(ValueError, match=r"mqar.num_needles: must be in \[1, num_kv_pairs=24\)"):
        MQARConfig(num_kv_pairs=PAIRS, num_needles=PAIRS, hub_keys=1)
    with pytest.raises(ValueError, match=r"seq_len: hub-key MQAR .* needs seq_len >= 56"):
        SyntheticBatches(DataConfig(source="mqar", seq_len=50, mqar=MQARConfig(
            num_kv_pairs=PAIRS, num_needles=NEEDLES, hub_keys=1))).batch(jnp.int32(0))
    plain = SyntheticBatches(DataConfig(source="mqar", seq_len=4 * PAIRS, mqar=MQARConfig(num_kv_pairs=PAIRS)))
    with pytest.raises(ValueError, match=r"hubs: only for hub-key MQAR"):
        plain.batch(jnp.int32(0), hubs=2)


def test_the_table_takes_the_best_rate_per_seed_and_reports_ccq_off_and_the_engagement():
    engagement = {"lambda_mean": 0.2, "applied_at_positions": 0.05, "sigma_top1": 0.3, "effective_rank": 4.0}
    rows = [{"family": "ccq-gla", "steps": 10, "hubs": 1, "seed": s, "lr": lr, "test_accuracy": acc,
             "test_accuracy_ccq_off": acc / 2, "engagement": engagement}
            for s, lr, acc in [(0, 1e-3, 0.5), (0, 2e-3, 0.7), (1, 1e-3, 0.9)]]
    text = hub_mqar.table(rows)
    assert "| ccq-gla | 10 | 64 | 1 | 0, 1 | 80.0 +- 14.1 | 70.0 / 90.0 | 40.0 | 0.2 | 5.00 % | 0.3 | 4 |" in text
    wide = [{**r, "width": 128, "test_accuracy": 1.0} for r in rows]  # another width is another row, never maxed over
    text = hub_mqar.table(rows + wide)
    assert "| ccq-gla | 10 | 64 | 1 | 0, 1 | 80.0 +- 14.1 |" in text and "| ccq-gla | 10 | 128 | 1 | 0, 1 | 100.0 +- 0.0 |" in text


def test_the_table_command_reads_several_files_and_names_a_missing_one(tmp_path, capsys):
    rows = [{"family": f, "steps": 10, "hubs": 1, "seed": 0, "lr": 1e-3, "test_accuracy": 0.5,
             "test_accuracy_ccq_off": None, "engagement": None} for f in ("gla", "gdn")]
    for row in rows:
        (tmp_path / f"{row['family']}.jsonl").write_text(json.dumps(row) + "\n")
    assert hub_mqar.main(["table", str(tmp_path / "gla.jsonl"), str(tmp_path / "gdn.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "| gla | 10 | 64 | 1 | 0 | 50.0" in out and "| gdn | 10 | 64 | 1 | 0 | 50.0" in out
    with pytest.raises(SystemExit):
        hub_mqar.main(["table", str(tmp_path / "gla.jsonl"), str(tmp_path / "none.jsonl")])
    assert "error: rows: no such file: " in capsys.readouterr().err


def test_the_plot_breaks_a_family_line_where_it_has_no_rows(tmp_path, monkeypatch):
    from ccq_jax import figures

    rows = [{"family": f, "steps": 10, "hubs": m, "seed": s, "lr": 1e-3, "test_accuracy": 0.01 * m + 0.05 * s,
             "test_accuracy_ccq_off": None, "engagement": None}
            for f, hubs in [("gla", (1, 2, 48)), ("gdn", (1, 48))] for m in hubs for s in (0, 1)]
    drawn = {}

    def keep(fig, path, **kwargs):
        drawn.update({line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()})
        return figures.save_png(fig, path, **kwargs)

    monkeypatch.setattr(hub_mqar, "save_png", keep)
    path = hub_mqar.plot(rows, tmp_path / "hub.png")
    assert path.stat().st_size > 0
    np.testing.assert_allclose(drawn["gla (width 64)"], [3.5, 4.5, 50.5])
    np.testing.assert_allclose(drawn["gdn (width 64)"], [3.5, np.nan, 50.5])  # no point at m = 2: the line breaks
