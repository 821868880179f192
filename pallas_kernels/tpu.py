"""What every Mosaic TPU kernel shares: the products' precision, the grid's semantics, interpret mode's checks, and
the cost estimate XLA schedules by."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128  # the last axis of a TPU block: widths pad to a multiple of this


def dot(a, b, dtype, trans_a=False, trans_b=False):
    """a @ b (a^T, b^T as asked) with operands in `dtype`, fp32 accumulation."""
    precision = jax.lax.Precision.HIGHEST if jnp.dtype(dtype).itemsize >= 4 else None
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
    return jax.lax.dot_general(a.astype(dtype), b.astype(dtype), dims, precision=precision,
                               preferred_element_type=jnp.float32)


def sequential_params():
    """A (B, H, N) grid: batch and heads split across cores, the chunks walked in order on one."""
    return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))


def interpret_params(interpret):
    """TPU interpret mode with its checks (a race detector, NaN-filled fresh memory, two cores taking the
    "parallel" grid points in random order), or compiled."""
    if not interpret:
        return False
    return pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan", num_cores_or_threads=2, random_seed=0)


def cost_estimate(arrays, out_shape, steps, flops, transcendentals=0):
    """XLA's view of a kernel on a grid of `steps` points (`flops`, `transcendentals` per point): every array read
    or written once, as each block of these grids is visited once."""
    nbytes = sum(x.size * jnp.dtype(x.dtype).itemsize for x in [*arrays, *jax.tree.leaves(out_shape)])
    return pl.CostEstimate(flops=int(steps * flops), transcendentals=int(steps * transcendentals),
                           bytes_accessed=int(nbytes))
