"""The inference tests reuse the model tests' helpers and compile settings."""

from tests.models.conftest import fast_compiles  # noqa: F401  (autouse fixture)
