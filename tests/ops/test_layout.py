"""The ops wing's floors (`ccq_jax/ops/_src/__init__.py`), checked on every import statement of its modules,
function-level ones included and relative ones resolved: no op package imports a sibling (the composite ops import
the ops they compose, listed here), the shared floors import no op, the XLA floor imports no Pallas code, and the
wing's modules form no import cycle."""

import ast
import pathlib

from tests.builders import import_cycle

ROOT = pathlib.Path(__file__).resolve().parents[2]
WING = "ccq_jax.ops"
SRC = f"{WING}._src"
OPS = ("gla", "gated_delta_rule", "generalized_delta_rule", "ccq_query", "ccq_gla", "ccq_gated_delta_rule",
       "ccq_generalized_delta_rule", "lm_head", "attention")
COMPOSES = {"ccq_gla": {"ccq_query", "gla"}, "ccq_gated_delta_rule": {"ccq_query", "gated_delta_rule"},
            "ccq_generalized_delta_rule": {"ccq_query", "generalized_delta_rule"}}
SHARED = (f"{SRC}.xla", f"{SRC}.pallas", f"{SRC}.dispatch", f"{WING}.sharding")


def _wing():
    """{module name: (its package, parsed source)} of every module of the ops wing."""
    out = {}
    for path in sorted((ROOT / "ccq_jax" / "ops").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        init = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if init else parts)
        out[name] = (name if init else name.rsplit(".", 1)[0], ast.parse(path.read_text()))
    return out


def _imports(package, tree, known):
    """(line, module) for every import anywhere in `tree` (a module of `package`), relative ones resolved; `from m
    import n` names the submodule m.n where n is one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                yield node.lineno, f"{module}.{a.name}" if f"{module}.{a.name}" in known else module


def _within(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def _op_of(module):
    parts = module.split(".")
    return parts[3] if len(parts) > 3 and parts[:3] == SRC.split(".") and parts[3] in OPS else None


def _edges():
    wing = _wing()
    return [(m, line, target) for m, (package, tree) in wing.items() for line, target in _imports(package, tree, wing)]


def test_the_modules_resolve():
    """Every import of the wing's own modules names a module that exists (the checks below see every edge)."""
    wing = _wing()
    missing = [f"{m}:{line}: {t}" for m, line, t in _edges() if _within(t, WING) and t not in wing]
    assert not missing, "\n".join(missing)


def test_no_op_imports_a_sibling_op():
    found = []
    for module, line, target in _edges():
        mine, theirs = _op_of(module), _op_of(target)
        if theirs is None or theirs == mine:
            continue
        if mine is not None and theirs in COMPOSES.get(mine, ()):
            continue
        if mine is None and not any(_within(module, s) for s in SHARED):
            continue  # the public package and its re-exports (ccq_jax.ops, internals) import every op
        found.append(f"{module}:{line}: {target}")
    assert not found, "\n".join(found)


def test_the_xla_floor_imports_no_pallas():
    found = [f"{m}:{line}: {t}" for m, line, t in _edges() if _within(m, f"{SRC}.xla")
             and (_within(t, "pallas_kernels") or _within(t, f"{SRC}.pallas") or _within(t, "jax.experimental.pallas"))]
    assert not found, "\n".join(found)


def test_no_import_cycle_in_the_wing():
    """Importing a.b imports a first, so an edge to a module is one to its packages too (a module's own packages
    are running already)."""
    wing = _wing()
    graph = {m: set() for m in wing}
    for module, _, target in _edges():
        if not _within(target, WING):
            continue
        parts = target.split(".")
        chain = {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & wing.keys()
        own = {".".join(module.split(".")[:i]) for i in range(1, len(module.split(".")) + 1)}
        graph[module] |= chain - own
    cycle = import_cycle(graph)
    assert not cycle, cycle
