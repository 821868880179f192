"""Input checks for the public ops: each failure is a ValueError naming the argument and what was expected.

Shape and dtype checks always run. Value checks (q, k, v finite; g <= 0, beta in [0, 2], lam in [0, 1] or
>= 0, count >= 0) need values, so they run when the array is concrete (eager calls) and are
skipped under `jax.jit` tracing, where no value exists yet, unless the trace runs under
`ccq_jax.ops.checked` (`checking.py`): then they are `checkify` checks in the program.
"""

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from .checking import traced_checks_on
from .numerics import doc_ids
from .types import READS, CCQStats, ReadPolicy


def as_array(name, x):
    try:
        return jnp.asarray(x)
    except TypeError as err:
        raise ValueError(f"{name}: expected an array, got {type(x).__name__}") from err


def floating(name, x):
    x = as_array(name, x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name}: expected a floating dtype (bfloat16, float16, float32), got {x.dtype}")
    return x


def shaped(name, x, expected, letters):
    """`x` must have shape `expected` (ints, or None for 'any'); `letters` names the dims for the message."""
    ok = x.ndim == len(expected) and all(e is None or e == s for e, s in zip(expected, x.shape))
    if not ok:
        want = ", ".join(f"{l}={e}" if e is not None else l for l, e in zip(letters, expected))
        raise ValueError(f"{name}: expected shape [{want}], got {tuple(x.shape)}")
    return x


def _inside(x, lo, hi):
    """Where the NumPy or JAX array x lies in [lo, hi] (a bound of None: unbounded); never where x is NaN."""
    return (x >= (-np.inf if lo is None else lo)) & (x <= (np.inf if hi is None else hi))


def _first_bad(x, ok_of, expected):
    """The value checks' one mechanism: (index, value) of the first element of x where `ok_of` (elementwise, on
    NumPy or JAX arrays) is False, None when there is none. A traced x has no values: under
    `ccq_jax.ops.checked` the check is emitted as a checkify check whose message is `expected` and the bad value,
    else skipped; either way None."""
    if isinstance(x, jax.core.Tracer):
        if traced_checks_on():
            ok = jnp.ravel(ok_of(x))
            checkify.check(jnp.all(ok), expected + " {bad}", bad=jnp.ravel(x)[jnp.argmin(ok)])
        return None
    with jax.ensure_compile_time_eval():  # a concrete array inside a trace (a closed-over constant) stays concrete
        ok = ok_of(x)
        if bool(jnp.all(ok)):  # reduced on the device: only a failing array comes to the host
            return None
    where = tuple(int(i) for i in np.argwhere(~np.asarray(ok))[0])
    return list(where), float(np.asarray(x, np.float64)[where])


def in_range(name, x, lo, hi, meaning):
    """Values of x must lie in [lo, hi] (either bound may be None); checked on concrete arrays, and on traced ones
    as a checkify check under `ccq_jax.ops.checked`."""
    expected = f"{name}: expected values in [{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}] " \
               f"({meaning}); found"
    bad = _first_bad(x, lambda a: _inside(a, lo, hi), expected)
    if bad is not None:
        raise ValueError(f"{expected} {bad[1]}")


def finite(name, x):
    """Values of x must be finite: a NaN or inf in one token's q, k or v reaches other tokens' outputs in the
    chunked and kernel forms (their masked intra-chunk products give 0 * inf = NaN), so it is refused rather than
    left to give a form-dependent result. Checked like `in_range`."""
    expected = f"{name}: expected finite values (no NaN or inf); found"
    bad = _first_bad(x, jnp.isfinite, expected)
    if bad is not None:
        raise ValueError(f"{expected} {bad[1]} at index {bad[0]}")


def qkv(q, k, v=None):
    """q, k: [B, T, H, K]; v: [B, T, H, V], all finite. Returns the arrays and (B, T, H, K, V)."""
    q = shaped("q", floating("q", q), (None,) * 4, "BTHK")
    b, t, h, dk = q.shape
    if t < 1:
        raise ValueError(f"q: expected at least one token (T >= 1), got shape {tuple(q.shape)}")
    k = shaped("k", floating("k", k), (b, t, h, dk), "BTHK")
    finite("q", q)
    finite("k", k)
    if v is None:
        return q, k, None, (b, t, h, dk, None)
    v = shaped("v", floating("v", v), (b, t, h, None), "BTHV")
    finite("v", v)
    return q, k, v, (b, t, h, dk, v.shape[-1])


def per_token(name, x, dims, letters, lo=None, hi=None, meaning=""):
    x = shaped(name, floating(name, x), dims, letters)
    in_range(name, x, lo, hi, meaning)
    return x


def scale(value, dk):
    if value is None:
        return dk**-0.5
    if not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"scale: expected a positive finite number, got {value!r}")
    return float(value)


def _fp32_or_wider(x):
    return x.astype(jnp.result_type(jnp.float32, x.dtype))


def state(value, b, h, dk, dv):
    if value is None:
        return jnp.zeros((b, h, dk, dv), jnp.float32)
    return _fp32_or_wider(shaped("initial_state", floating("initial_state", value), (b, h, dk, dv), "BHKV"))


def stats(value, b, h, dk):
    if value is None:
        return CCQStats(jnp.zeros((b, h, dk, dk), jnp.float32), jnp.zeros((b, h, dk), jnp.float32), jnp.zeros((b, h), jnp.float32))
    if not isinstance(value, tuple) or len(value) != 3:
        raise ValueError("initial_stats: expected a CCQStats(cov, key_sum, count) tuple")
    cov, key_sum, count = value
    cov = shaped("initial_stats.cov", floating("initial_stats.cov", cov), (b, h, dk, dk), "BHKK")
    key_sum = shaped("initial_stats.key_sum", floating("initial_stats.key_sum", key_sum), (b, h, dk), "BHK")
    count = shaped("initial_stats.count", floating("initial_stats.count", count), (b, h), "BH")
    in_range("initial_stats.count", count, 0, None, "a number of tokens")
    return CCQStats(*(_fp32_or_wider(x) for x in (cov, key_sum, count)))


def segment_ids(value, b, t):
    if value is None:
        return None
    value = shaped("segment_ids", as_array("segment_ids", value), (b, t), "BT")
    if not jnp.issubdtype(value.dtype, jnp.integer):
        raise ValueError(f"segment_ids: expected an integer dtype, got {value.dtype}")
    return value


def positive_integer(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def chunk_size(value):
    return positive_integer("chunk_size", value)


def documents(value, b, t):
    """segment_ids (or None) as the monotone document index [B, T] int32 the implementations take."""
    return doc_ids(segment_ids(value, b, t), b, t)


def gla_inputs(q, k, v, g):
    """(q, k, v, g, (B, T, H, K, V)) of a GLA op: g per key channel, a log decay <= 0."""
    q, k, v, dims = qkv(q, k, v)
    b, t, h, dk, _ = dims
    g = per_token("g", g, (b, t, h, dk), "BTHK", hi=0, meaning="log decay: g <= 0")
    return q, k, v, g, dims


def generalized_inputs(q, k, v, g, a):
    """(q, k, v, g, a, (B, T, H, K, V)) of a generalized-delta-rule op: g per key channel <= 0, a the erase vector
    [B, T, H, K] (finite)."""
    q, k, v, g, dims = gla_inputs(q, k, v, g)
    a = shaped("a", floating("a", a), g.shape, "BTHK")
    finite("a", a)
    return q, k, v, g, a, dims


def delta_inputs(q, k, v, g, beta):
    """(q, k, v, g, beta, (B, T, H, K, V)) of a gated-delta-rule op: g per head <= 0, beta in [0, 2]."""
    q, k, v, dims = qkv(q, k, v)
    b, t, h = dims[:3]
    g = per_token("g", g, (b, t, h), "BTH", hi=0, meaning="log decay: g <= 0")
    beta = per_token("beta", beta, (b, t, h), "BTH", lo=0, hi=2, meaning="delta-rule step size")
    return q, k, v, g, beta, dims


def read_policy(read):
    """The CCQ read policy: None (the paper's first-order read), a name of `READS`, or a `ReadPolicy`; returned as
    a `ReadPolicy` whose unused counts are 1 (one compiled program per distinct read)."""
    if read is None:
        return ReadPolicy()
    policy = ReadPolicy(read) if isinstance(read, str) else read
    if not isinstance(policy, ReadPolicy) or policy.kind not in READS:
        raise ValueError(f"read: expected one of {list(READS)} or a ccq_jax.ops.ReadPolicy, got {read!r}")
    terms, iterations = (positive_integer(f"read.{name}", getattr(policy, name)) for name in ("terms", "iterations"))
    return ReadPolicy(policy.kind, terms if policy.kind == "neumann" else 1, iterations if policy.kind == "cg" else 1)


def ccq_gate(lam, b, t, h, read=ReadPolicy(), name="lam"):
    """The CCQ gate lambda [B, T, H] (the argument `name`): in [0, 1] for the first-order and Neumann reads (a
    contraction, a convergent series), >= 0 for conjugate gradient (I + lam Sigma is positive definite for any
    lam >= 0)."""
    if read.kind == "cg":
        return per_token(name, lam, (b, t, h), "BTH", lo=0, meaning="CCQ gate lambda, >= 0 for read 'cg'")
    return per_token(name, lam, (b, t, h), "BTH", lo=0, hi=1, meaning="CCQ gate lambda")
