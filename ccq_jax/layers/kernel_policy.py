"""`KernelPolicy`: which implementations a model's layers run, one frozen value handed to them whole.

    impl         reads of more than one token (training, prefill): a `ccq_jax.ops` impl (`IMPLS`), default
                 "chunk" (XLA's chunkwise form); "pallas" the kernels
    decode_impl  reads of one token per row (a decode step), default "recurrent" (XLA's fusions)
    chunk_size   the chunk of `impl`'s chunked forms (None: the op's default)
    head_impl    the LM head of a decode step: "xla" (XLA's GEMM) or "pallas" (the row-matmul kernel,
                 `ccq_jax.ops.internals.head_logits`)
    interpret    the kernels' `interpret`: None interprets them exactly on a CPU; False compiles them also there,
                 for ahead-of-time compilation to another platform (`ccq-compile` for a TPU topology)
    axes         the mesh axes the ops and the short convolutions split over under the current mesh
                 (`ccq_jax.ops.OpsAxes`, default empty: none, whatever the mesh); the trainer sets its own
                 (`train.sharding.OPS_AXES`). In config.json its tuples are lists; a config without it loads empty.

It is the `kernel` field of every model config (`kernel.impl=pallas` as an override). The impl names are the ops'
(`ccq_jax.ops.IMPLS`), checked here for the models and by the ops' registry for a direct op call. The softmax
Transformer's attention is not a kernel of this policy: its backend is `TransformerConfig.sdpa_impl`.
"""

import dataclasses
from typing import Literal

from ccq_jax import configlib
from ccq_jax import checks as check
from ccq_jax.ops import IMPLS, REFERENCES, OpsAxes

TPU_KERNELS = "pallas_mosaic_tpu"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelPolicy:
    """impl, decode_impl, chunk_size: the linear-attention reads; head_impl: a decode step's LM head; interpret:
    the kernels' interpretation; axes: the mesh axes they split over (see the module docstring)."""

    impl: str = "chunk"
    decode_impl: str = "recurrent"
    chunk_size: int | None = None
    head_impl: Literal["xla", "pallas"] = "xla"
    interpret: bool | None = None
    axes: OpsAxes = OpsAxes()

    def __post_init__(self):
        configlib.check_field_types(self, prefix="kernel.")
        configlib.check_choice("kernel.impl", self.impl, IMPLS)
        configlib.check_choice("kernel.decode_impl", self.decode_impl, IMPLS)
        check.integer("kernel.chunk_size", self.chunk_size, minimum=1, optional=True)

    def check_interpret(self, splash: bool) -> None:
        """ValueError naming kernel.interpret when it is set and nothing it applies to runs: none of `impls` picks a
        kernel and the model's attention layers are not on splash attention (`splash`: sdpa_impl="splash", whose
        kernel takes this `interpret`). The model configs call it; they know their sdpa_impl."""
        if self.interpret is not None and not (self.runs_kernels or splash):
            chosen = ", ".join(f"kernel.{k}={v!r}" for k, v in self.impls.items())
            raise ValueError(f"kernel.interpret: {chosen} run no kernels and sdpa_impl is not 'splash'; leave "
                             f"kernel.interpret unset (None) or pick a kernel impl")

    @property
    def impls(self) -> dict:
        """{field: impl} of the fields that pick kernels or XLA's forms (`interpret` applies to these)."""
        return {"impl": self.impl, "decode_impl": self.decode_impl, "head_impl": self.head_impl}

    @property
    def runs_kernels(self) -> bool:
        """Whether any of `impls` picks a kernel (not XLA's forms: the references, "xla")."""
        return any(impl not in (*REFERENCES, "xla") for impl in self.impls.values())

    def read_options(self, tokens: int) -> dict:
        """The ops' keyword options (impl, axes, and chunk_size / interpret where they apply) of a read of `tokens`
        tokens per row: `decode_impl` for one token, `impl` for more; chunk_size goes with `impl`."""
        impl = self.decode_impl if tokens == 1 else self.impl
        options = {"impl": impl, "axes": self.axes}
        if impl == self.impl and self.chunk_size is not None:
            options["chunk_size"] = self.chunk_size
        if impl not in REFERENCES and self.interpret is not None:
            options["interpret"] = self.interpret
        return options

    def head_options(self, decode_step: bool) -> dict:
        """`ccq_jax.ops.internals.head_logits`'s impl and interpret: the "pallas" head on a decode step only."""
        if decode_step and self.head_impl == "pallas":
            return {"impl": "pallas", "interpret": self.interpret}
        return {"impl": "xla", "interpret": None}

    def for_tpu(self, splash: bool) -> "KernelPolicy":
        """The policy compiled for a TPU: "pallas" and "pallas_mosaic_tpu" run the Mosaic TPU kernels with
        interpret=False; XLA's forms stay (with interpret=False where `splash`: the attention layers' splash kernel
        compiled, not interpreted); GPU-only kernels are a ValueError."""
        if self.impl in REFERENCES:
            return dataclasses.replace(self, interpret=False) if splash else self
        if self.impl not in ("pallas", TPU_KERNELS):
            raise ValueError(f"kernel.impl: {self.impl!r} has no TPU kernels; use 'pallas', {TPU_KERNELS!r} or "
                             f"'chunk'")
        return dataclasses.replace(self, impl=TPU_KERNELS, interpret=False)
