"""Settings for the whole suite: compile with most XLA optimisations off.

The test inputs are tiny, so programs run in microseconds either way, while compiling them
dominates the suite's time; without the optimisation passes compiles take about half as
long. Results stay at fp32 round-off (the tolerances are checked against float64
references either way). Restored after each test.
"""

import jax
import pytest


@pytest.fixture(autouse=True)
def fast_compiles():
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)
