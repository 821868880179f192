"""checks="checkify": a debugging run whose train step runs the ops' range checks inside the jitted program
(`ccq_jax.ops.checked`); it trains as the default does, and a gate out of range inside the step is raised naming
the argument instead of training on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import train.loop as loop
import train.step as step
from tests.train.tiny_run import tiny_config
from train.metrics import read_metrics

CFG = dict(steps=3, steps_per_call=2, checkpoint_every=0, eval_batches=0)


def test_a_checked_run_trains_as_the_default(tmp_path):
    loop.train(tiny_config(**CFG), tmp_path / "eager", progress=False)
    loop.train(tiny_config(**CFG, checks="checkify"), tmp_path / "checked", progress=False)
    losses = {name: [r["loss"] for r in read_metrics(tmp_path / name / "metrics.jsonl")]
              for name in ("eager", "checked")}
    assert len(losses["checked"]) == 3
    np.testing.assert_allclose(losses["checked"], losses["eager"], rtol=1e-6)


def test_a_gate_out_of_range_inside_the_step_is_named(tmp_path, monkeypatch):
    init_state = step.init_state  # what build_train_call builds the run's state with

    def nan_params(*args, **kwargs):  # NaN in the gates' projections only: q, k and v stay finite
        graphdef, others, state = init_state(*args, **kwargs)
        poison = lambda path, x: x * jnp.nan if any("gk_proj" in str(p) for p in path) else x
        return graphdef, others, state._replace(params=jax.tree.map_with_path(poison, state.params))

    monkeypatch.setattr(step, "init_state", nan_params)
    with pytest.raises(checkify.JaxRuntimeError, match=r"g: expected values in \[-inf, 0\] \(log decay: g <= 0\); "
                                                       r"found nan"):
        loop.train(tiny_config(**CFG, checks="checkify"), tmp_path / "checked", progress=False)
    with pytest.raises(loop.NonFiniteLoss):  # the default: no check inside the step, the loss is NaN
        loop.train(tiny_config(**CFG), tmp_path / "eager", progress=False)


def test_checks_is_a_named_choice():
    with pytest.raises(ValueError, match="checks"):
        tiny_config(checks="jit")
