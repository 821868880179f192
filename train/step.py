"""The train state, its sharded initialisation, and the jit-compiled train and eval steps.

The state is a pytree `TrainState(params, opt_state, step)`; the model's graph definition
stays static. `compile_steps` jits the step with `in_shardings`/`out_shardings` taken from
the state itself and donates the old state. Gradient accumulation scans over microbatches;
the loss is the mean next-token NLL over `loss_mask` (targets never cross documents, so
packed batches are handled by the data and the model's `segment_ids`), optionally formed a
slice of positions at a time (`loss_chunk_len`, `train.loss`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ccq_jax.models import CausalLM, abstract_model
from train.loss import loss_sums
from train.sharding import batch_sharding, replicated, state_shardings


class TrainState(NamedTuple):
    params: nnx.State
    opt_state: optax.OptState
    step: jax.Array


def split_model(model):
    """(graphdef, params, other variables) of an NNX model."""
    return nnx.split(model, nnx.Param, ...)


def init_state(model_cfg, optimizer, mesh, seed: int):
    """Build parameters directly in their shards (never whole on one device) and the optimizer state.

    Returns (graphdef, others, state).
    """
    abstract = abstract_model(model_cfg)
    graphdef, abstract_params, abstract_others = split_model(abstract)
    shardings = (state_shardings(abstract_params, mesh), state_shardings(abstract_others, mesh))

    def build():
        _, params, others = split_model(CausalLM(model_cfg, rngs=nnx.Rngs(seed)))
        return params, others

    params, others = jax.jit(build, out_shardings=shardings)()
    # optimizer moments are sharded like their parameters; counters are replicated
    opt_shardings = optax.tree_map_params(optimizer, lambda _, sharding: sharding,
                                          jax.eval_shape(optimizer.init, params), shardings[0],
                                          transform_non_params=lambda _: replicated(mesh))
    opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)
    step = jax.device_put(jnp.zeros((), jnp.int32), replicated(mesh))
    return graphdef, others, TrainState(params, opt_state, step)


def lm_loss(graphdef, params, others, batch, loss_chunk_len=0):
    """(sum of masked NLL, (number of scored tokens, recall correct, recall scored)); see `train.loss`."""
    model = nnx.merge(graphdef, params, others)
    x, _ = model.hidden_states(batch["input_ids"], segment_ids=batch["segment_ids"])
    return loss_sums(x, model.head(), model.config.compute_dtype, batch, loss_chunk_len)


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


def compile_steps(train_step, eval_step, state: TrainState, mesh):
    """jit both steps with explicit shardings; the train step donates its input state."""
    state_sh = jax.tree.map(lambda x: x.sharding, state)
    batch_sh = batch_sharding(mesh)
    train = jax.jit(train_step, in_shardings=(state_sh, batch_sh), out_shardings=(state_sh, replicated(mesh)),
                    donate_argnums=0)
    evaluate = jax.jit(eval_step, in_shardings=(state_sh.params, batch_sh), out_shardings=replicated(mesh))
    return train, evaluate
