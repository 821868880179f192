"""`ccq_jax.ops.checked`: the ops' range checks, skipped under `jax.jit`, run inside the jitted program under it as
`jax.experimental.checkify` checks naming the argument; without it the same jitted call passes silently."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import checkify

import ccq_jax.ops as ops


def _inputs(g_value=-0.1, lam_value=0.5, v_inf=False):
    shape = (1, 8, 2, 4)
    q, k, v = (jax.random.normal(jax.random.key(i), shape) for i in range(3))
    v = v.at[0, 5, 1, 2].set(jnp.inf) if v_inf else v
    return q, k, v, jnp.full(shape, g_value), jnp.full(shape[:3], lam_value)


def gla_output(q, k, v, g, lam):
    return ops.gla(q, k, v, g)[0]


def ccq_output(q, k, v, g, lam):
    return ops.ccq_gla(q, k, v, g, lam)[0]


@pytest.mark.parametrize("op,bad,message", [
    (gla_output, {"g_value": 0.5}, r"g: expected values in \[-inf, 0\] \(log decay: g <= 0\); found 0.5"),
    (ccq_output, {"lam_value": 1.5}, r"lam: expected values in \[0, 1\] \(CCQ gate lambda\); found 1.5"),
    (ccq_output, {"g_value": jnp.nan}, r"g: expected values in \[-inf, 0\] .*found nan"),
    (gla_output, {"v_inf": True}, r"v: expected finite values \(no NaN or inf\); found inf"),
])
def test_an_out_of_range_value_fails_inside_jit_only_under_checked(op, bad, message):
    err, out = jax.jit(ops.checked(op))(*_inputs(**bad))
    with pytest.raises(checkify.JaxRuntimeError, match=message):
        err.throw()
    jax.block_until_ready(jax.jit(op)(*_inputs(**bad)))  # without it: no check, as documented


def test_in_range_values_pass_and_give_the_unchecked_output():
    err, out = jax.jit(ops.checked(ccq_output))(*_inputs())
    err.throw()
    assert jnp.array_equal(out, jax.jit(ccq_output)(*_inputs()))


def test_the_checks_end_with_the_trace_under_checked():
    """A context variable set for the trace: a function jitted after `checked` traced is not checked."""
    jax.jit(ops.checked(gla_output))(*_inputs())
    jax.block_until_ready(jax.jit(lambda *a: gla_output(*a))(*_inputs(g_value=0.5)))
    with pytest.raises(ValueError, match="g: expected values in"):  # eager calls raise as before
        gla_output(*_inputs(g_value=0.5))
