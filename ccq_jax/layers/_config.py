"""Frozen, self-validating config dataclasses: the `@config` decorator and the field checks they share.

A config class is a keyword-only frozen dataclass whose `__post_init__` validates each field;
every failure is a `ValueError` naming the field. Unknown keys are rejected with the closest
valid name (`difflib`), both in the constructor and in `.replace(**changes)`.
"""

import dataclasses
import difflib
import functools
import math
import numbers


def reject_unknown(owner: str, keys, valid) -> None:
    """ValueError for the first key not in `valid`, suggesting the closest valid name."""
    for key in keys:
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid names: {', '.join(sorted(valid))}"
            raise ValueError(f"{owner}: unknown field {key!r}{hint}")


def config(cls):
    """Make `cls` a frozen keyword-only dataclass that rejects unknown keys and has `.replace(**changes)`."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    init = cls.__init__

    @functools.wraps(init)
    def checked_init(self, **kwargs):
        reject_unknown(type(self).__name__, kwargs, {f.name for f in dataclasses.fields(self)})
        init(self, **kwargs)

    cls.__init__ = checked_init
    cls.replace = lambda self, **changes: dataclasses.replace(self, **changes)
    return cls


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


def boolean(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")


def choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices, key=str)}, got {value!r}")
