"""The ops' value checks inside `jax.jit`, through `jax.experimental.checkify`, for debugging runs.

The value checks of `ccq_jax.ops._src.xla.validate` (q, k, v finite; g <= 0, beta in [0, 2], lam in [0, 1]
or >= 0, count >= 0) need values: on concrete arrays they raise a ValueError at once, and under tracing
they are skipped, since no value exists yet. `checked(fn)` is `checkify.checkify(fn)` with those
checks emitted as `checkify.check`s while `fn` is traced under it, so they run inside the jitted
program:

    err, out = jax.jit(ccq_jax.ops.checked(step))(params, batch)
    err.throw()  # JaxRuntimeError: g: expected values in [-inf, 0] (log decay: g <= 0); found 0.5

Only the trace under `checked` emits them (a context variable set for its duration, not a switch
of the module): the same function jitted without it compiles without checks, and so does a
function jitted on its own inside `fn` that was traced without the checks before (jit keeps its
trace).
"""

import contextvars
import functools

from jax.experimental import checkify

_TRACING_CHECKED = contextvars.ContextVar("ccq_jax_tracing_checked", default=False)


def traced_checks_on() -> bool:
    """Whether the function being traced runs under `checked`: range checks on tracers become checkify checks."""
    return _TRACING_CHECKED.get()


def checked(fn, errors=checkify.user_checks):
    """`checkify.checkify(fn, errors)` with the ops' range checks emitted while `fn` is traced under it: the result
    returns (error, fn's output); `error.throw()` raises the first failed check, naming the argument. `errors`:
    checkify's error sets (e.g. `checkify.user_checks | checkify.nan_checks` also flags NaNs made inside)."""

    @functools.wraps(fn)
    def with_checks(*args, **kwargs):
        token = _TRACING_CHECKED.set(True)
        try:
            return fn(*args, **kwargs)
        finally:
            _TRACING_CHECKED.reset(token)

    return checkify.checkify(with_checks, errors=errors)
