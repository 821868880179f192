"""Value checks shared by the layers, the model configs, inference and evaluation: each failure is a ValueError
naming the field.

Types of config fields are checked by `ccq_jax.configlib.check_field_types`; these checks add
the ranges (and the types, for layers built directly from Python arguments).
"""

import math
import numbers


def integer(name, value, *, minimum=None, optional=False):
    if value is None and optional:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value}")


def real(name, value, *, lo=None, hi=None, lo_open=False, optional=False):
    """A finite real number in [lo, hi] (or (lo, hi] with lo_open)."""
    if value is None and optional:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    below = lo is not None and (value <= lo if lo_open else value < lo)
    if below or (hi is not None and value > hi):
        left = "(" if lo_open else "["
        raise ValueError(f"{name}: expected a value in {left}{lo if lo is not None else '-inf'}, "
                         f"{hi if hi is not None else 'inf'}], got {value}")
