"""The layout rules the code keeps: no module imports another module's private name, no file of the library over
400 lines, no import cycle between the project's modules (imports inside functions included), and the layers
import only downward: the kernels (`pallas_kernels`) are a leaf, the library (`ccq_jax`) imports none of the
applications (train, eval, study, benchmarks), and eval never imports train."""

import ast
import pathlib

from tests.builders import import_cycle

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ccq_jax", "pallas_kernels", "train", "eval", "study", "benchmarks", "tests")
LIBRARY = ("ccq_jax", "pallas_kernels")


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _ours(module):
    return module.split(".")[0] in PACKAGES


def _private_uses(tree):
    """(line, what) for each private name of a project module this module imports or reaches by attribute."""
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _ours(a.name):
                    if any(_private(p) for p in a.name.split(".")):
                        yield node.lineno, a.name
                    modules.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            if any(_private(p) for p in node.module.split(".")):
                yield node.lineno, node.module
            for a in node.names:
                if _private(a.name):
                    yield node.lineno, f"{node.module}.{a.name}"
                modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                and node.value.id in modules:
            yield node.lineno, f"{node.value.id}.{node.attr}"


def test_no_module_imports_a_private_name_of_another():
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for _, path in _modules()
             for line, what in _private_uses(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)


def test_no_library_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for package in LIBRARY for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def _imports(tree, known):
    """The project modules a module imports, at its top level or inside a function (a `from package import name`
    counts the submodule when `name` is one)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in known:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs or {node.module}
            if len(subs) < len(node.names):
                out.add(node.module)
    return out


def test_no_import_cycle():
    paths = dict(_modules())
    graph = {m: _imports(ast.parse(p.read_text()), paths.keys()) - {m} for m, p in paths.items()}
    for m in graph:  # a package's __init__ runs before its submodules: importing a.b imports a
        graph[m] = {d for dep in graph[m] for d in _with_parents(dep, paths)} - {m} - set(_with_parents(m, paths))
    cycle = import_cycle(graph)
    assert not cycle, cycle


def _project_imports(path):
    """(line, module) for each project module `path` imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if _ours(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            yield node.lineno, node.module


def _imports_of_packages(importer, forbidden):
    """'path:line: module' for each import of a `forbidden` package by a module of package `importer`."""
    return [f"{path.relative_to(ROOT)}:{line}: {name}" for path in sorted((ROOT / importer).rglob("*.py"))
            for line, name in _project_imports(path) if name.split(".")[0] in forbidden]


def test_the_kernels_are_a_leaf():
    found = _imports_of_packages("pallas_kernels", ("ccq_jax", "train", "eval", "study", "benchmarks"))
    assert not found, "\n".join(found)


def test_the_library_imports_no_application():
    found = _imports_of_packages("ccq_jax", ("train", "eval", "study", "benchmarks"))
    assert not found, "\n".join(found)


def test_eval_never_imports_train():
    found = _imports_of_packages("eval", ("train",))
    assert not found, "\n".join(found)


def _with_parents(module, paths):
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in paths]


def test_tests_share_builders_through_one_module():
    """Tests import shared inputs, models and checks from tests/builders.py, never from a conftest or another
    test module, and only the tests of a benchmark script (tests/benchmarks/) import `benchmarks`, except its dev
    tools (`benchmarks.tools`: lowering, compilation counters, kernel twins), which tests and benchmarks share."""
    found = []
    for module, path in _modules():
        if not module.startswith("tests."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                last = name.split(".")[-1]
                shared = name.startswith("tests.") and (last == "conftest" or last.startswith("test_"))
                tool = (name.split(".")[0] == "benchmarks" and not name.startswith("benchmarks.tools")
                        and not module.startswith("tests.benchmarks"))
                if shared or tool:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, "\n".join(found)
