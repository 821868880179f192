"""Settings for the whole suite: compile with most XLA optimisations off, and free each file's programs.

The test inputs are tiny, so programs run in microseconds either way, while compiling them
dominates the suite's time; without the optimisation passes compiles take about half as
long. Results stay at fp32 round-off (the tolerances are checked against float64
references either way). Restored after each test.

Every program XLA's CPU backend compiles maps its machine code into the process (three
memory mappings per kernel), and JAX keeps every compiled program cached. A test worker
that runs half the suite gathers tens of thousands of mappings; at the kernel's limit
(`vm.max_map_count`, 65530 by default) the next compile fails inside LLVM as a
segmentation fault. Clearing JAX's caches after each test file frees them (the files
share no compiled programs).

The commands turn on a persistent compilation cache in the user's home (`ccq_jax.cli`); the
suite runs them with it off (`CCQ_JAX_COMPILATION_CACHE=off`, inherited by the commands it
starts as processes), so tests write nothing there. The suite's own process keeps one in its
pytest temporary folder instead (one per worker, gone with the folder): the files compile many of
the same programs (the tiny models' training steps above all), and after a file's caches are
freed the next file loads them from disk instead of compiling them again (six tests/train files:
139 s without it, 111 s with it, on the 2-core machine); not for the TPU compilations of `-m tpu_aot`.

The files of `SLOWEST` run first, each whole and in that order, the rest in collection order
after them: `--dist loadfile` hands files to the two workers as they free up, and in collection
order the slowest files (most of them under tests/train/) came last, so one worker ran the
last of them alone for minutes.
"""

import jax
import pytest

# the files that take two minutes or more of one worker (`pytest --durations=80`, 2026-12-06), slowest first
SLOWEST = ("train/test_learning.py", "ops/test_context_parallel.py", "train/test_context_parallel_attention.py",
           "pallas/test_tpu_interpret.py", "train/test_training.py", "train/test_context_parallel.py")


def pytest_collection_modifyitems(items):
    rank = lambda item: next((i for i, name in enumerate(SLOWEST) if item.nodeid.startswith(f"tests/{name}::")),
                             len(SLOWEST))
    items[:] = sorted(items, key=rank)  # stable: each file's tests keep their order


@pytest.fixture(autouse=True, scope="session")
def no_compilation_cache_in_home():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CCQ_JAX_COMPILATION_CACHE", "off")
        yield


@pytest.fixture(autouse=True, scope="session")
def persistent_compilation_cache(request, tmp_path_factory):
    if any(item.get_closest_marker("tpu_aot") for item in request.session.items):
        # libtpu's ahead-of-time executables do not load back on a CPU client (JAX warns "Error reading persistent
        # compilation cache entry ... DeserializeLoadedExecutable") and are large to write: no cache there
        yield
        return
    settings = {"jax_compilation_cache_dir": str(tmp_path_factory.getbasetemp() / "xla-cache"),
                "jax_persistent_cache_min_compile_time_secs": 0.5}
    previous = {name: getattr(jax.config, name) for name in settings}
    for name, value in settings.items():
        jax.config.update(name, value)
    yield
    for name, value in previous.items():
        jax.config.update(name, value)


@pytest.fixture(autouse=True)
def fast_compiles():
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


@pytest.fixture(autouse=True, scope="module")
def free_compiled_programs():
    yield
    jax.clear_caches()
