"""The train state, its sharded initialisation, the jit-compiled train and eval steps, and the recipe of a run's
train call.

`build_train_call(cfg, mesh)` is the one recipe every trainer uses (the training loop, `ccq-compile`, the
benchmarks and the MQAR sweep): the run's optimizer, its state built in its shards (or abstract, for
ahead-of-time compilation), its train step and the compiled call of `steps_per_call` steps, as MaxText's
train_compile reuses the builders of its train.py.

The state is a pytree `TrainState(params, opt_state, step)`; the model's graph definition
stays static. `compile_steps` jits the step with `in_shardings`/`out_shardings` taken from
the state itself and donates the old state. `compile_train_calls` runs up to `steps_per_call`
steps in one device program (a loop on the device: one dispatch and one host round trip per
call, which is what keeps a small model's GPU busy), with each step's batch either made on the
device from the step number (synthetic tasks) or taken from a stack of host batches.
Gradient accumulation scans over microbatches; the loss is the mean next-token NLL over
`loss_mask` (targets never cross documents, so packed batches are handled by the data and the
model's `segment_ids`), optionally formed a slice of positions at a time (`loss_chunk_len`,
`train.loss`).

With `checks="checkify"` the train calls run under `ccq_jax.ops.checked`: the ops' range checks
(gates, lambda, counts), skipped inside a jitted program otherwise, are checked there too, and a
failed one is raised after the call, naming the argument (a debugging run: one host wait per call).
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ccq_jax import ops
from ccq_jax.models import ModelConfig, abstract_model, init_split
from train.config import TrainConfig
from train.loss import loss_sums
from train.optim import make_optimizer
from train.sharding import (batch_sharding, replicated, sequence_runs, split_sequences, state_shardings,
                            with_ops_axes)


class TrainState(NamedTuple):
    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array


def split_model(model):
    """(graphdef, params, other variables) of an NNX model."""
    return nnx.split(model, nnx.Param, ...)


def abstract_state(model_cfg, optimizer, mesh):
    """(graphdef, others, state) with `jax.ShapeDtypeStruct`s carrying each variable's sharding in place of arrays:
    what `init_state` builds, without building it (ahead-of-time compilation, `train.aot`). Optimizer moments are
    sharded like their parameters; counters and the step are replicated."""
    graphdef, params, others = split_model(abstract_model(model_cfg))
    shaped = lambda tree, shardings: jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                                                  tree, shardings)
    params = shaped(params, state_shardings(params, mesh))
    opt_state = jax.eval_shape(optimizer.init, params)
    opt_shardings = optax.tree_map_params(optimizer, lambda _, x: x.sharding, opt_state, params,
                                          transform_non_params=lambda _: replicated(mesh))
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated(mesh))
    return (graphdef, shaped(others, state_shardings(others, mesh)),
            TrainState(params, shaped(opt_state, opt_shardings), step))


def init_state(model_cfg, optimizer, mesh, seed: int):
    """Build parameters directly in their shards (never whole on one device) and the optimizer state.

    Returns (graphdef, others, state), laid out as `abstract_state` says.
    """
    graphdef, _, abstract = abstract_state(model_cfg, optimizer, mesh)
    shardings = _shardings(abstract)
    _, params, others = init_split(model_cfg, seed, shard=lambda state: state_shardings(state, mesh))
    opt_state = jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params)
    step = jax.device_put(jnp.zeros((), jnp.int32), shardings.step)
    return graphdef, others, TrainState(params, opt_state, step)


def lm_loss(graphdef, params, others, batch, loss_chunk_len=0):
    """(sum of masked NLL, (number of scored tokens, recall correct, recall scored)); see `train.loss`."""
    model = nnx.merge(graphdef, params, others)
    batch = split_sequences(batch)
    x, _ = model.hidden_states(batch["input_ids"], segment_ids=batch["segment_ids"])
    return loss_sums(x, model.head(), model.config.compute_dtype, batch, loss_chunk_len, sequence_runs())


def _microbatches(batch, n):
    return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), batch)


def make_train_step(graphdef, others, optimizer, *, grad_accum: int, skip_nonfinite: bool, loss_chunk_len: int = 0):
    grad_fn = jax.value_and_grad(lambda p, b: lm_loss(graphdef, p, others, b, loss_chunk_len), has_aux=True)

    def step(state: TrainState, batch):
        def accumulate(carry, micro):
            (loss, aux), grads = grad_fn(state.params, micro)
            return jax.tree.map(jnp.add, carry, (loss, aux, grads)), None

        zero = (jnp.zeros(()), (jnp.zeros(()),) * 3, jax.tree.map(jnp.zeros_like, state.params))
        (loss_sum, (tokens, correct, scored), grads), _ = jax.lax.scan(accumulate, zero,
                                                                         _microbatches(batch, grad_accum))
        tokens = jnp.maximum(tokens, 1.0)
        grads = jax.tree.map(lambda g: (g / tokens).astype(g.dtype), grads)  # keeps the optimizer state's dtype
        loss = loss_sum / tokens
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        new = TrainState(params, opt_state, state.step + 1)
        if skip_nonfinite:
            new = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, state._replace(step=state.step + 1))
        metrics = {"loss": loss, "grad_norm": grad_norm, "finite": finite, "tokens": tokens,
                   "recall_correct": correct, "recall_scored": scored}
        return new, metrics

    return step


def make_eval_step(graphdef, others, loss_chunk_len: int = 0):
    def evaluate(params, batch):
        loss_sum, (tokens, correct, scored) = lm_loss(graphdef, params, others, batch, loss_chunk_len)
        return {"loss_sum": loss_sum, "tokens": tokens, "recall_correct": correct, "recall_scored": scored}

    return evaluate


def _jit_on(mesh, fn, checks="eager", **jit_options):
    """`jax.jit` of `fn` traced with `mesh` as the current mesh, so the ops' kernels run on each device's slice
    (`ccq_jax.ops.sharding`). Only the steps trace under it: NNX would shard a model built there by its logical
    axis names. checks="checkify": `fn` under `ccq_jax.ops.checked`, its error (replicated) raised after each call."""

    def on_mesh(*args):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args)

    if checks == "eager":
        return jax.jit(on_mesh, **jit_options)
    jitted = jax.jit(ops.checked(on_mesh), **{**jit_options,
                                              "out_shardings": (replicated(mesh), jit_options["out_shardings"])})

    def checked_call(*args):
        error, out = jitted(*args)
        error.throw()
        return out

    return checked_call


def _shardings(state: TrainState):
    return jax.tree.map(lambda x: x.sharding, state)


def _zeros(shapes, leading=()):
    """Zero arrays of the `jax.eval_shape` result `shapes`, each with `leading` dimensions in front."""
    return jax.tree.map(lambda m: jnp.zeros((*leading, *m.shape), m.dtype), shapes)


def _calls(train_step, steps_per_call: int, batch_of):
    """(state, n, batches) -> (state, metrics of each step stacked [steps_per_call]): the first n steps of a call.

    `batch_of(state, i, batches)` gives step i's batch; rows of `metrics` from n on are zeros.
    """

    def call(state, n, batches):
        rows = _zeros(jax.eval_shape(train_step, state, batch_of(state, 0, batches))[1], (steps_per_call,))

        def one(i, carry):
            state, rows = carry
            state, metrics = train_step(state, batch_of(state, i, batches))
            return state, jax.tree.map(lambda r, m: r.at[i].set(m), rows, metrics)

        return jax.lax.fori_loop(0, n, one, (state, rows))

    return call


def compile_train_calls(train_step, state: TrainState, mesh, steps_per_call: int, make_batch=None, checks="eager"):
    """jit a call of up to `steps_per_call` train steps (its state donated), compiled once for any n <= steps_per_call.

    With `make_batch` (step -> global batch, jittable: `train.data.synthetic`) the call is
    `call(state, n)` and makes its batches on the device; without, it is `call(state, n, batches)`
    with host batches stacked on a leading axis of length steps_per_call (the first n are used).
    Returns metrics of every step stacked [steps_per_call] (replicated). checks="checkify": the ops' range checks
    run in the call, a failed one raised after it (`ccq_jax.ops.checked`).
    """
    state_sh = _shardings(state)
    batch_sh = batch_sharding(mesh)
    n_sh = replicated(mesh)
    if make_batch is not None:
        batch_of = lambda s, i, _: jax.lax.with_sharding_constraint(make_batch(s.step), batch_sh)
        call = _calls(train_step, steps_per_call, batch_of)
        return _jit_on(mesh, lambda state, n: call(state, n, None), checks, in_shardings=(state_sh, n_sh),
                       out_shardings=(state_sh, replicated(mesh)), donate_argnums=0)
    stacked_sh = batch_sharding(mesh, stacked=True)
    batch_of = lambda s, i, batches: jax.tree.map(lambda x: x[i], batches)
    return _jit_on(mesh, _calls(train_step, steps_per_call, batch_of), checks,
                   in_shardings=(state_sh, n_sh, stacked_sh), out_shardings=(state_sh, replicated(mesh)),
                   donate_argnums=0)


def compile_synthetic_eval(eval_step, state: TrainState, mesh, make_batch, num_batches: int):
    """jit the sums of `eval_step` over make_batch(0) ... make_batch(num_batches - 1), made on the device."""
    batch_sh = batch_sharding(mesh)

    def evaluate(params):
        def one(i, totals):
            out = eval_step(params, jax.lax.with_sharding_constraint(make_batch(i), batch_sh))
            return jax.tree.map(jnp.add, totals, out)

        zeros = _zeros(jax.eval_shape(eval_step, params, make_batch(jnp.int32(0))))
        return jax.lax.fori_loop(0, num_batches, one, zeros)

    return _jit_on(mesh, evaluate, in_shardings=(_shardings(state).params,), out_shardings=replicated(mesh))


def compile_eval_step(eval_step, state: TrainState, mesh):
    """jit the eval step on one host batch, with the parameters' and the batch's shardings."""
    return _jit_on(mesh, eval_step, in_shardings=(_shardings(state).params, batch_sharding(mesh)),
                   out_shardings=replicated(mesh))


def compile_steps(train_step, eval_step, state: TrainState, mesh):
    """jit both steps with explicit shardings; the train step donates its input state."""
    state_sh = _shardings(state)
    train = _jit_on(mesh, train_step, in_shardings=(state_sh, batch_sharding(mesh)),
                    out_shardings=(state_sh, replicated(mesh)), donate_argnums=0)
    return train, compile_eval_step(eval_step, state, mesh)


class TrainCall(NamedTuple):
    """What `build_train_call` built: the model's graph definition and non-parameter variables, the train state
    (arrays in their shards, or `ShapeDtypeStruct`s), the train step (uncompiled) and the compiled call `run`
    (`compile_train_calls`)."""

    graphdef: Any
    others: Any
    state: TrainState
    step: Callable
    run: Callable


def build_train_call(cfg: TrainConfig, mesh, model: ModelConfig | None = None, make_batch=None, *,
                     abstract: bool = False, checks: str | None = None, optimizer=None, wrap=None) -> TrainCall:
    """The run's train call: `cfg`'s optimizer over its steps, the state of `model` (default `cfg.model_config`; its
    ops split over the mesh's axes as the parameters and batches are, `train.sharding.with_ops_axes`) initialised
    from `cfg.seed` in its shards on `mesh` (abstract=True: shapes and shardings only, nothing built), `cfg`'s
    train step (grad_accum, on_nan="skip", loss_chunk_len) and the call of `cfg.steps_per_call` steps on
    batches from `make_batch` (None: host batches), its checks `checks` (None: `cfg.checks`).

    optimizer: in place of cfg's (e.g. cfg's chained with more). wrap(graphdef, others, state, step) ->
    (state, step): what the call trains instead, e.g. states stacked on a member axis and the step vmapped over it
    (`study.mqar_sweep`).
    """
    optimizer = make_optimizer(cfg.optim, cfg.steps) if optimizer is None else optimizer
    model = with_ops_axes(cfg.model_config if model is None else model)
    graphdef, others, state = (abstract_state(model, optimizer, mesh) if abstract else
                               init_state(model, optimizer, mesh, cfg.seed))
    step = make_train_step(graphdef, others, optimizer, grad_accum=cfg.grad_accum,
                           skip_nonfinite=cfg.on_nan == "skip", loss_chunk_len=cfg.loss_chunk_len)
    if wrap is not None:
        state, step = wrap(graphdef, others, state, step)
    run = compile_train_calls(step, state, mesh, cfg.steps_per_call, make_batch,
                              cfg.checks if checks is None else checks)
    return TrainCall(graphdef, others, state, step, run)
