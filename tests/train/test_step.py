"""The jitted train step on its own: it keeps the state's dtypes (bf16 parameters, fla's recipe, get bf16 gradients
and optimizer moments, so the step neither recompiles at its second call nor promotes the optimizer state to fp32),
with skip_nonfinite a non-finite step leaves the state as it was but for the step count, and a loss formed a slice
of positions at a time (loss_chunk_len) takes the same step as the whole, and a call of several steps in one device
program (compile_train_calls) takes the steps one call each would, with host or device-made batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.models import get_config
from ccq_jax.ops import OpsAxes
from tests.train.tiny_run import tiny_config
from train.optim import OptimConfig, make_optimizer
from train.sharding import OPS_AXES, RULES, MeshConfig, make_mesh
from train.data import DataConfig
from train.data.synthetic import SyntheticBatches
from train.step import (abstract_state, build_train_call, compile_steps, compile_train_calls, init_state,
                        make_eval_step, make_train_step)


def _raw_step_and_state(param_dtype, grad_accum=1, skip_nonfinite=False, loss_chunk_len=0, dtype="bfloat16"):
    cfg = get_config("gla-tiny", num_hidden_layers=1, hidden_size=32, vocab_size=64, dtype=dtype,
                     param_dtype=param_dtype)
    mesh = make_mesh(MeshConfig())
    optimizer = make_optimizer(OptimConfig(lr=1e-3, warmup_steps=0), 4)
    graphdef, others, state = init_state(cfg, optimizer, mesh, seed=0)
    step = make_train_step(graphdef, others, optimizer, grad_accum=grad_accum, skip_nonfinite=skip_nonfinite,
                           loss_chunk_len=loss_chunk_len)
    return step, make_eval_step(graphdef, others, loss_chunk_len), state, mesh


def _step_and_state(*args, **kwargs):
    step, eval_step, state, mesh = _raw_step_and_state(*args, **kwargs)
    train_step, _ = compile_steps(step, eval_step, state, mesh)
    return train_step, state


def _batch():
    ids = np.random.default_rng(0).integers(0, 64, (2, 17), dtype=np.int32)
    batch = {"input_ids": ids[:, :-1], "targets": ids[:, 1:], "segment_ids": np.ones((2, 16), np.int32),
             "loss_mask": np.ones((2, 16), np.int32)}
    return {k: jnp.asarray(v) for k, v in batch.items()}


@pytest.mark.parametrize("param_dtype,grad_accum", [("bfloat16", 1), ("bfloat16", 2), ("float32", 2)])
def test_step_keeps_state_dtypes(param_dtype, grad_accum):
    train_step, state = _step_and_state(param_dtype, grad_accum)
    dtypes = jax.tree.map(lambda x: x.dtype, state)
    for _ in range(2):
        state, metrics = train_step(state, _batch())
    assert jax.tree.map(lambda x: x.dtype, state) == dtypes
    assert train_step._cache_size() == 1
    assert np.isfinite(float(metrics["loss"]))


def test_skip_nonfinite_keeps_the_previous_state():
    train_step, state = _step_and_state("float32", skip_nonfinite=True)
    poisoned = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.nan) if x.ndim == 2 else x, state.params)
    state = state._replace(params=poisoned)
    before = jax.tree.map(np.asarray, state)
    after, metrics = train_step(state, _batch())
    assert not bool(metrics["finite"]) and int(after.step) == int(before.step) + 1
    same = lambda a, b: np.array_equal(a, b, equal_nan=True)
    assert all(jax.tree.leaves(jax.tree.map(same, (after.params, after.opt_state), (before.params, before.opt_state))))


def test_sliced_loss_takes_the_same_step():
    (step_whole, state), (step_sliced, _) = (_step_and_state("float32", loss_chunk_len=n, dtype="float32")
                                             for n in (0, 5))
    copy = jax.tree.map(jnp.copy, state)  # each step donates the state it is given
    whole, m_whole = step_whole(state, _batch())
    sliced, m_sliced = step_sliced(copy, _batch())
    np.testing.assert_allclose(float(m_sliced["loss"]), float(m_whole["loss"]), rtol=1e-6)
    np.testing.assert_allclose(float(m_sliced["grad_norm"]), float(m_whole["grad_norm"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(sliced.params), jax.tree.leaves(whole.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("synthetic", [False, True])
def test_a_call_of_several_steps_takes_the_same_steps(synthetic):
    step, eval_step, state, mesh = _raw_step_and_state("float32", dtype="float32")
    one, _ = compile_steps(step, eval_step, state, mesh)
    data = DataConfig.from_dict({"source": "mqar", "seq_len": 16, "batch_size": 2,
                                 "mqar": {"vocab_size": 64, "num_kv_pairs": 2}})
    make = SyntheticBatches(data).batch
    batches = [jax.tree.map(np.asarray, make(jnp.int32(i))) for i in range(3)]
    calls = compile_train_calls(step, state, mesh, 4, make if synthetic else None)
    copy = jax.tree.map(jnp.copy, state)
    expected = []
    for batch in batches:
        state, metrics = one(state, batch)
        expected.append(metrics)
    stacked = {k: np.stack([b[k] for b in batches] + [np.zeros_like(batches[0][k])]) for k in batches[0]}
    args = () if synthetic else (stacked,)
    after, metrics = calls(copy, np.int32(3), *args)  # 3 of up to 4 steps
    assert int(after.step) == 3 and calls._cache_size() == 1
    _close(after.params, state.params)
    for key in ("loss", "grad_norm", "recall_correct"):
        np.testing.assert_allclose(metrics[key][:3], [float(m[key]) for m in expected], rtol=1e-6)
        assert metrics[key][3] == 0  # the step that did not run
    again, _ = calls(after, np.int32(1), *args)  # another length, the same program
    assert int(again.step) == 4 and calls._cache_size() == 1


def test_abstract_state_is_what_init_state_builds():
    """`abstract_state` (ahead-of-time compilation) and `init_state` agree leaf by leaf: shape, dtype, sharding."""
    cfg = get_config("ccq-gla-tiny", num_hidden_layers=2, hidden_size=32, vocab_size=64, param_dtype="float32")
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1))
    optimizer = make_optimizer(OptimConfig(lr=1e-3, warmup_steps=0), 4)
    _, others, state = init_state(cfg, optimizer, mesh, seed=0)
    _, abstract_others, abstract = abstract_state(cfg, optimizer, mesh)
    describe = lambda tree: [(x.shape, x.dtype, x.sharding) for x in jax.tree.leaves(tree)]
    assert describe((others, state)) == describe((abstract_others, abstract))
    assert jax.tree.structure((others, state)) == jax.tree.structure((abstract_others, abstract))


def test_the_train_call_builds_its_model_splitting_over_the_axes_of_train_sharding():
    """`build_train_call`, every trainer's recipe (the loop, ccq-compile, the benchmarks, the MQAR sweep's
    members), builds the model the train and eval steps run with the ops' axes `train.sharding` derives from its
    rules: its reads' kernel policy and its short convolutions."""
    assert OPS_AXES == OpsAxes(batch=dict(RULES)["batch"], heads=dict(RULES)["heads"], context="context")
    cfg = tiny_config(model_overrides={"num_hidden_layers": 1, "hidden_size": 32, "use_short_conv": True})
    assert cfg.model_config.kernel.axes == OpsAxes()  # the model as users name it: no mesh in it
    built = build_train_call(cfg, make_mesh(cfg.mesh), abstract=True)
    model = nnx.merge(built.graphdef, built.state.params, built.others)
    found = [getattr(m, "kernel_policy", m).axes for _, m in nnx.iter_graph(model)
             if hasattr(m, "kernel_policy") or type(m).__name__ == "ShortConvolution"]
    assert len(found) == 4 and set(found) == {OPS_AXES}  # one layer's reads and its three convolutions
