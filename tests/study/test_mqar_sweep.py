"""study/mqar_sweep.py: the rates trained side by side are the separate AdamW runs; the sweep skips finished
cells; the table and the accuracy-against-width plot."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from study.mqar_sweep import (CELLS, LEARNING_RATES, TEST_EXAMPLES, main, plot, run_config, sweep, table,
                               train_cell, train_members)
from train.data.synthetic import SyntheticBatches
from train.config import fit_vocab
from train.optim import make_optimizer
from train.sharding import make_mesh
from train.step import compile_train_calls, init_state, make_train_step

TINY_CELL = (32, 4, 8)  # sequence length, pairs, batch


def _separate_run(cfg, lr):
    """cfg trained alone by the project's own optimizer at peak rate lr."""
    mesh = make_mesh(cfg.mesh)
    data = SyntheticBatches(cfg.data)
    optim = cfg.optim.__class__(**{**cfg.optim.__dict__, "lr": lr})
    optimizer = make_optimizer(optim, cfg.steps)
    graphdef, others, state = init_state(fit_vocab(cfg, data.vocab_size), optimizer, mesh, cfg.seed)
    step = make_train_step(graphdef, others, optimizer, grad_accum=1, skip_nonfinite=False)
    run = compile_train_calls(step, state, mesh, cfg.steps, data.batch)
    state, _ = run(state, jnp.int32(cfg.steps))
    return state.params


def test_members_equal_separate_runs_at_their_rates():
    """ccq-gdn: the members' vmap over a CCQ read and a delta rule (any family trains through the same code)."""
    cfg = run_config("ccq-gdn", 32, TINY_CELL, 5, "chunk", 0)
    rates = (1e-3, 1e-2)
    *_, state, _, last, _ = train_members(cfg, rates, steps_per_call=2)
    assert last["loss"].shape == (2,) and int(state.step) == 5
    for i, lr in enumerate(rates):
        want = _separate_run(cfg, lr)
        got = jax.tree.map(lambda x: x[i], state.params)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):  # fp32 rounding apart (vmap reorders sums)
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            assert np.sqrt(np.mean((a - b) ** 2) / np.mean(b**2)) < 1e-4
    moved = [float(jnp.max(jnp.abs(a[0] - a[1]))) for a in jax.tree.leaves(state.params)]
    assert max(moved) > 1e-3  # the two rates did train differently


def test_cell_rows_score_each_rate_on_the_test_set():
    rows = train_cell(run_config("gla", 32, TINY_CELL, 3, "chunk", 0), (1e-3, 1e-2), steps_per_call=3)
    assert [r["lr"] for r in rows] == [1e-3, 1e-2]
    for r in rows:
        assert 0.0 <= r["test_accuracy"] <= 1.0 and np.isfinite(r["test_loss"]) and np.isfinite(r["final_train_loss"])
        # a scored position per pair and example: accuracies are multiples of 1 / (pairs * TEST_EXAMPLES)
        scored = TINY_CELL[1] * TEST_EXAMPLES
        assert abs(r["test_accuracy"] * scored - round(r["test_accuracy"] * scored)) < 1e-3
    assert rows[0]["test_loss"] != rows[1]["test_loss"]


def test_sweep_skips_cells_already_in_its_file(tmp_path):
    out = tmp_path / "sweep.jsonl"
    row = {"family": "gla", "width": 64, "cell": "T256-kv16", "steps": 7, "seed": 0, "lr": 1e-3, "test_accuracy": 0.5}
    out.write_text(json.dumps(row) + "\n")
    assert sweep(out, ("gla",), (64,), ("T256-kv16",), LEARNING_RATES, steps=7, impl="chunk", seed=0) == 0
    assert out.read_text().count("\n") == 1


def test_table_and_plot_report_the_best_rate_per_width_and_keep_seeds_and_budgets_apart(tmp_path):
    rows = [{"family": f, "width": w, "cell": c, "steps": 2000, "seed": 0, "lr": lr, "test_accuracy": acc}
            for c in CELLS for f in ("gla", "transformer") for w in (64, 128)
            for lr, acc in ((1e-3, 0.2 * w / 64), (1e-2, 0.1))]
    rows += [{**r, "seed": 1, "test_accuracy": r["test_accuracy"] / 2} for r in rows if r["family"] == "gla"]
    rows += [{**r, "steps": 16000, "test_accuracy": 0.9} for r in rows
             if (r["family"], r["cell"], r["width"], r["seed"]) == ("transformer", "T512-kv64", 64, 0)]
    text = table(rows)
    assert "| T256-kv16 | 2000 | gla | 0, 1 | 20.0 / 10.0 | 40.0 / 20.0 |" in text
    assert "| T512-kv64 | 2000 | transformer | 0 | 20.0 | 40.0 |" in text
    assert "| T512-kv64 | 16000 | transformer | 0 | 90.0 | - |" in text
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["plot", str(rows_file), "--out", str(tmp_path / "acc.png")]) == 0
    assert (tmp_path / "acc.png").stat().st_size > 10_000
    assert plot(rows, tmp_path / "again.png").exists()


def test_run_refuses_a_family_it_does_not_know(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--out", "x.jsonl", "--families", "mamba"])
    assert "expected names from" in capsys.readouterr().err
