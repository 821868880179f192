"""The shared config machinery: nested dicts, type checks, unknown keys with suggestions, --set overrides."""

import dataclasses
from typing import Literal

import pytest

from ccq_jax import configlib


@dataclasses.dataclass(frozen=True)
class Inner:
    lr: float = 1e-3
    mode: Literal["a", "b"] = "a"

    def __post_init__(self):
        configlib.check_field_types(self, "inner.")


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str = "x"
    steps: int = 10
    inner: Inner = Inner()
    sizes: tuple[int, ...] = (1, 2)
    note: str | None = None

    def __post_init__(self):
        configlib.check_field_types(self)


def test_from_dict_nested_and_coerced():
    cfg = configlib.from_dict(Outer, {"steps": 5, "inner": {"lr": 1}, "sizes": [3, 4]})
    assert cfg == Outer(steps=5, inner=Inner(lr=1.0), sizes=(3, 4))


@pytest.mark.parametrize("data,match", [
    ({"stpes": 3}, r"stpes: unknown key for Outer \(did you mean 'steps'\?\)"),
    ({"inner": {"lrr": 3}}, r"inner\.lrr: unknown key for Inner \(did you mean 'lr'\?\)"),
    ({"steps": "many"}, r"steps: expected int, got str 'many'"),
    ({"inner": {"mode": "c"}}, r"inner\.mode: expected Literal\['a', 'b'\], got str 'c'"),
    ({"sizes": 3}, r"sizes: expected tuple\[int, \.\.\.\], got int 3"),
    ({"zzz": 1}, r"zzz: unknown key for Outer$"),
])
def test_from_dict_errors(data, match):
    with pytest.raises(ValueError, match=match):
        configlib.from_dict(Outer, data)


def test_overrides():
    cfg = configlib.with_overrides(Outer(), configlib.parse_overrides(["inner.lr=0.5", "steps=7", "note=hi"]))
    assert cfg == Outer(steps=7, inner=Inner(lr=0.5), note="hi")
    with pytest.raises(ValueError, match=r"inner\.mod: unknown key \(did you mean 'mode'\?\)"):
        configlib.with_overrides(Outer(), {"inner.mod": "a"})
    with pytest.raises(ValueError, match=r"steps: is not a nested config"):
        configlib.with_overrides(Outer(), {"steps.x": 1})
    with pytest.raises(ValueError, match=r"--set: expected key=value, got 'steps'"):
        configlib.parse_overrides(["steps"])


def test_exponent_floats_without_a_dot_are_floats(tmp_path):
    # plain YAML 1.1 reads 1e-3 as a string, so `--set optim.lr=1e-3` (README's own example) was refused
    values = configlib.parse_overrides(["a=1e-3", "b=-2E+4", "c=.5e1", "d=1.5", "e=7", "f=e5", "g=1e", "h=[3e-1]"])
    assert values == {"a": 1e-3, "b": -2e4, "c": 5.0, "d": 1.5, "e": 7, "f": "e5", "g": "1e", "h": [0.3]}
    assert configlib.with_overrides(Outer(), {"inner.lr": values["a"]}).inner.lr == 1e-3
    path = tmp_path / "run.yaml"
    path.write_text("inner:\n  lr: 3e-4\n")
    assert configlib.from_dict(Outer, configlib.load_yaml(path)).inner.lr == 3e-4
