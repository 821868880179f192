"""Typed, frozen config dataclasses from plain dicts (YAML, `--set` overrides), with clear errors.

Every config in the project (models, training, data, evaluation) is a frozen dataclass whose
`__post_init__` validates its own values; this module holds what they share.

`from_dict(cls, data)` builds a (possibly nested) frozen dataclass from a mapping: nested
mappings become nested dataclasses, lists become tuples, and an unknown key raises a
`ValueError` naming its full dotted path and the closest valid name. `check_field_types(obj)`
(call it from `__post_init__`) rejects values whose type does not match the annotation, so a
config built directly in Python is checked the same way. `check_choice` validates an enum-like
string field with a "did you mean" suggestion.

`with_overrides(cfg, {"a.b": value})` applies dotted-key overrides (`parse_overrides` reads
them from `--set a.b=value` strings) and `load_yaml` reads a config file.

Supported annotations: `int`, `float`, `str`, `bool`, `Literal[...]`, `X | None`,
`tuple[X, ...]` and nested dataclasses (also as tuple items: a list of mappings, or one mapping read as a
one-item tuple, as fla's hybrid `attn` entry is either).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import yaml

C = TypeVar("C")


def suggestion(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(field: str, value: str, choices: Iterable[str]) -> None:
    """ValueError naming `field` unless `value` is one of `choices`."""
    choices = tuple(choices)
    if value not in choices:
        hint = suggestion(str(value), choices)
        raise ValueError(f"{field}: unknown value {value!r}; expected one of {choices}{hint}")


def _is_optional(tp: Any) -> tuple[bool, Any]:
    """(True, X) for `X | None`, else (False, tp)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _matches(value: Any, tp: Any) -> bool:
    optional, tp = _is_optional(tp)
    if value is None:
        return optional
    if dataclasses.is_dataclass(tp):
        return isinstance(value, tp)
    if typing.get_origin(tp) is typing.Literal:
        return value in typing.get_args(tp)
    if typing.get_origin(tp) is tuple:
        (item, ellipsis) = typing.get_args(tp)
        assert ellipsis is Ellipsis, f"only tuple[X, ...] is supported, got {tp}"
        return isinstance(value, tuple) and all(_matches(v, item) for v in value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def check_field_types(obj: Any, prefix: str = "") -> None:
    """ValueError naming the first field of dataclass `obj` whose value does not match its annotation."""
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if not _matches(value, hints[field.name]):
            raise ValueError(
                f"{prefix}{field.name}: expected {_type_name(hints[field.name])}, "
                f"got {type(value).__name__} {value!r}"
            )


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Nested mapping -> dataclass, list -> tuple, int -> float, str -> 1-tuple of str, mapping -> 1-tuple of a
    dataclass; else unchanged. Tuple items are named `path[i]` in errors."""
    _, inner = _is_optional(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
        return from_dict(inner, value, prefix=f"{path}.")
    if typing.get_origin(inner) is tuple:
        (item, _) = typing.get_args(inner)
        if isinstance(value, str) and item is str:
            return (value,)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(item):
            return (from_dict(item, value, prefix=f"{path}."),)
        if isinstance(value, (list, tuple)):
            return tuple(_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value))
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def from_dict(cls: type[C], data: Mapping[str, Any], *, prefix: str = "") -> C:
    """Build dataclass `cls` from `data`; unknown keys raise ValueError with the closest valid name.

    `prefix` (e.g. "data.") is prepended to field names in error messages.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{prefix.rstrip('.') or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise ValueError(f"{prefix}{key}: unknown key for {cls.__name__}{suggestion(str(key), names)}")
        kwargs[key] = _convert(value, hints[key], f"{prefix}{key}")
    return cls(**kwargs)


def to_dict(obj: Any) -> dict[str, Any]:
    """The inverse of `from_dict`: nested plain dicts, tuples as lists (to store the resolved config as JSON/YAML)."""
    out = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = [to_dict(v) if dataclasses.is_dataclass(v) else v for v in value]
        out[field.name] = value
    return out


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that also reads exponent floats without a dot (1e-3, 5E4) as floats, as Python does;
    plain YAML 1.1 reads them as strings."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """['a.b=1', 'c=x'] -> {'a.b': 1, 'c': 'x'}; values are read as YAML scalars (numbers, bools, lists)."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set: expected key=value, got {item!r}")
        out[key.strip()] = yaml.load(raw, Loader=_Loader) if raw.strip() else ""
    return out


def with_overrides(obj: C, overrides: Mapping[str, Any], *, prefix: str = "") -> C:
    """A copy of dataclass `obj` with dotted-key overrides applied and validated like `from_dict`."""
    data = to_dict(obj)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = data
        for depth, part in enumerate(parents):
            where = prefix + ".".join(parents[: depth + 1])
            if part not in node:
                raise ValueError(f"{where}: unknown key{suggestion(part, node)}")
            if not isinstance(node[part], dict):
                raise ValueError(f"{where}: is not a nested config, cannot set {key!r}")
            node = node[part]
        if leaf not in node:
            raise ValueError(f"{prefix}{key}: unknown key{suggestion(leaf, node)}")
        node[leaf] = value
    return from_dict(type(obj), data, prefix=prefix)


def load_yaml(path) -> dict[str, Any]:
    with open(path) as f:
        data = yaml.load(f, Loader=_Loader) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}")
    return data
