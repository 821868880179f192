"""The one table from `impl=` names to backend modules; adding a backend is one line here.

A backend module defines `gla`, `gated_delta_rule` and `ccq_query` with the keyword
signatures of `ccq_jax.ops.recurrent`, plus `chunk_size` where it works in chunks. It may also
define fused `ccq_gla` / `ccq_gated_delta_rule`; without them the CCQ ops are composed from
its `ccq_query` and backbone.

Every backend is imported with the package, never on first use: importing Pallas registers jax
config options that are part of jit's cache key (the fuser's `pallas_fuser_disable_nested_fuse`),
so a first import inside a trace changed the key of the jit being traced, and that jit compiled
again on its next call (a 1.3B train step twice, about 2.5 minutes each on the H200).
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


_MODULES = {impl: importlib.import_module(path) for impl, path in BACKENDS.items()}


@functools.cache
def resolve(op, impl):
    """The jit-compiled backend function for `op`, or None when the backend does not define it."""
    fn = getattr(_MODULES[check_impl(impl)], op, None)
    if fn is None:
        return None
    static = [p for p in inspect.signature(fn).parameters if p in _STATIC]
    return jax.jit(fn, static_argnames=static)


def takes_chunk_size(op, impl):
    fn = getattr(_MODULES[check_impl(impl)], op)
    return "chunk_size" in inspect.signature(fn).parameters
