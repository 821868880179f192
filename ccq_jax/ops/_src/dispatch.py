"""How `impl=` picks an implementation: the names, the kernel backends as values, and the platform policy.

Every op's `api.py` holds a table {name: `Implementation`}. The reference forms ("recurrent",
"chunk", "scan") are plain XLA and run anywhere. Kernel backends say, through `supports`, whether
they take a call (platform, interpretation, dtypes, widths, chunk) and why not; `impl="pallas"`
means the first of `KERNELS` that takes it, and an explicit backend that does not take it is a
ValueError with its reason. Kernels run interpreted only on a CPU or when asked (`interpret=True`);
`interpret=False` on a CPU compiles them for a GPU (lowering ahead of time). A platform with no
compiled kernel gets a ValueError naming what is available, never the interpreter in silence.
"""

import dataclasses
import functools
from typing import Callable

import jax

from pallas_kernels.tiles import DEFAULT_CONFIG, KernelConfig

from .. import sharding
from .xla import validate

REFERENCES = ("recurrent", "chunk", "scan")
KERNELS = ("pallas_mosaic_gpu", "pallas_triton", "pallas_mosaic_tpu")  # impl="pallas": the first that takes it
IMPLS = (*REFERENCES, "pallas", *KERNELS)


@dataclasses.dataclass(frozen=True)
class Call:
    """What a kernel backend is asked to run: the platform, interpretation as asked (None: the platform's
    default), the inputs' common dtype, the key and value widths, and the chunk size (None: the backend's)."""

    platform: str
    interpret: bool | None
    dtype: object
    key_width: int
    value_width: int
    chunk_size: int | None


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One implementation of an op: its function (keyword arguments as `ccq_jax.ops`'s forms take them), whether
    it works in chunks (takes `chunk_size`), and for a kernel backend, `supports(Call) -> reason or None`."""

    fn: Callable
    chunked: bool = False
    supports: Callable[[Call], str | None] | None = None

    @property
    def kernel(self):
        return self.supports is not None


def check_impl(impl):
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {sorted(IMPLS)}, got {impl!r}")
    return impl


def interprets(call: Call) -> bool:
    """Whether kernels run interpreted: as asked, else exactly on a CPU."""
    return call.platform == "cpu" if call.interpret is None else bool(call.interpret)


def compiles_for_gpu(call: Call) -> bool:
    """Whether a GPU backend compiles `call`'s kernels: on a GPU unless interpretation is asked for, and on a CPU
    when interpret=False asks for it (lowering for a GPU ahead of time, `lowering_platforms=("cuda",)`)."""
    return not call.interpret and (call.platform == "gpu" or (call.platform == "cpu" and call.interpret is False))


def triton_support(call: Call) -> str | None:
    """Where the Triton kernels run: compiled for a GPU (`compiles_for_gpu`), interpreted on a CPU or wherever
    that is asked for."""
    if call.interpret or compiles_for_gpu(call) or call.platform == "cpu":
        return None
    return (f"the Triton kernels compile for a GPU only, and interpreted on a {call.platform} they would be the "
            f"slowest path there is (ask for that with interpret=True)")


def choose(op, table, impl, call):
    """(name, Implementation) of `table` for `impl` and `call`; ValueError with the reasons when none takes it."""
    check_impl(impl)
    if impl in REFERENCES:
        return impl, table[impl]
    names = [n for n in KERNELS if n in table] if impl == "pallas" else [impl]
    reasons = {}
    for name in names:
        if name not in table:
            raise ValueError(f"impl: {op} has no {name!r} backend; it has {sorted(table)} (and 'pallas')")
        reasons[name] = table[name].supports(call)
        if reasons[name] is None:
            return name, table[name]
    why = "; ".join(f"{n}: {r}" for n, r in reasons.items())
    if impl == "pallas":
        raise ValueError(f"impl: 'pallas' has no kernels for platform {call.platform!r} yet ({why}); use "
                         f"impl='chunk' there")
    raise ValueError(f"impl: {impl!r} does not take this call ({why})")


def kernel_config(config) -> KernelConfig:
    """`config` checked: a `KernelConfig`, or None for each kernel's own tiling (`DEFAULT_CONFIG`)."""
    if config is not None and not isinstance(config, KernelConfig):
        raise ValueError(f"config: expected a pallas_kernels.tiles.KernelConfig or None, got {config!r}")
    return config or DEFAULT_CONFIG


@functools.cache
def _jitted(fn, static):
    return jax.jit(fn, static_argnames=static)


def prepare(op, table, impl, call, *, static, config, axes):
    """The jitted function of the implementation `impl` picks for `call` (a kernel run on each device's slice
    of the current mesh split over `axes`, `sharding.local`), and the keyword options it takes: chunk_size
    (chunked forms), interpret and config (kernels); static: the op's own static argument names."""
    name, chosen = choose(op, table, impl, call)
    options = {}
    if call.chunk_size is not None:
        if not chosen.chunked:
            raise ValueError(f"chunk_size: impl={impl!r} does not work in chunks; leave chunk_size unset")
        options["chunk_size"] = validate.chunk_size(call.chunk_size)
    if chosen.kernel:
        options.update(interpret=interprets(call), config=kernel_config(config))
    elif config is not None or call.interpret is not None:
        raise ValueError(f"config, interpret: impl={name!r} runs no kernels; leave them unset")
    fn = _jitted(chosen.fn, tuple(static) + tuple(options))
    return (sharding.local(fn, axes) if chosen.kernel else fn), options


def call_of(*inputs, chunk_size, interpret):
    """The `Call` of an op on `inputs` (q, k, then v where the op has one) on the current default platform."""
    if interpret is not None and not isinstance(interpret, bool):
        raise ValueError(f"interpret: expected None, True or False, got {interpret!r}")
    return Call(platform=jax.default_backend(), interpret=interpret, dtype=jax.numpy.result_type(*inputs),
                key_width=inputs[0].shape[-1], value_width=inputs[-1].shape[-1], chunk_size=chunk_size)


def call_backbone(op, table, inputs, dims, *, scale, initial_state, output_final_state, segment_ids, impl,
                  chunk_size, config, interpret, axes):
    """A backbone op (`gla`, `gated_delta_rule`, `generalized_delta_rule`) on validated inputs (q, k, v, then its
    gates) of dims (B, T, H, K, V): the rest validated, the implementation chosen from `table`, the final state kept
    as asked. Returns (o, final_state or None)."""
    b, t, h, dk, dv = dims
    call = call_of(*inputs[:3], chunk_size=chunk_size, interpret=interpret)
    fn, options = prepare(op, table, impl, call, static=("scale",), config=config, axes=axes)
    o, final = fn(*inputs, scale=validate.scale(scale, dk), initial_state=validate.state(initial_state, b, h, dk, dv),
                  docs=validate.documents(segment_ids, b, t), **options)
    return o, (final if output_final_state else None)
