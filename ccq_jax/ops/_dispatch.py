"""The one table from `impl=` names to backend modules; adding a backend is one line here.

A backend module defines `gla`, `gated_delta_rule` and `ccq_query` with the keyword
signatures of `ccq_jax.ops.recurrent`, plus `chunk_size` where it works in chunks. It may also
define fused `ccq_gla` / `ccq_gated_delta_rule`; without them the CCQ ops are composed from
its `ccq_query` and backbone. Modules are imported on first use, so a backend whose
dependencies are missing costs nothing until it is asked for.
"""

import functools
import importlib
import inspect

import jax

BACKENDS = {
    "recurrent": "ccq_jax.ops.recurrent",
    "chunk": "ccq_jax.ops.chunk",
    "scan": "ccq_jax.ops.scan",
    "pallas": "ccq_jax.ops.pallas",
}

_STATIC = ("scale", "centered", "normalize_keys", "chunk_size")


def check_impl(impl):
    if impl not in BACKENDS:
        raise ValueError(f"impl: expected one of {sorted(BACKENDS)}, got {impl!r}")
    return impl


@functools.cache
def _module(impl):
    return importlib.import_module(BACKENDS[impl])


@functools.cache
def resolve(op, impl):
    """The jit-compiled backend function for `op`, or None when the backend does not define it."""
    fn = getattr(_module(check_impl(impl)), op, None)
    if fn is None:
        return None
    static = [p for p in inspect.signature(fn).parameters if p in _STATIC]
    return jax.jit(fn, static_argnames=static)


def takes_chunk_size(op, impl):
    fn = getattr(_module(check_impl(impl)), op)
    return "chunk_size" in inspect.signature(fn).parameters
