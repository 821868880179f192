"""What a compiled program launches and moves, read from its optimized HLO text (`compiled.as_text()`): for a
deviceless target, which has no cost analysis (`cost_analysis()` is None there), the launches of the entry
computation grouped by kind, and a memory-traffic estimate per kind: each launch's output bytes plus its operands'
(each operand counted whole, once per launch; what a fusion reads twice or only in part is not modelled).

Kinds: "gemm" (XLA's GEMM fusions and cuBLAS calls), "kernel" (custom calls: Pallas kernels through Triton or
Mosaic GPU, cuDNN), "triton fusion" (XLA's own Triton-emitted fusions, e.g. normalisations), "loop fusion"
(elementwise), "input fusion" (reductions, transposes), "while" (a loop's carried state read and written once; its
body is not read); any other instruction under its own name (e.g. "copy", "all-gather"). Aliases (bitcast,
get-tuple-element, tuple), parameters and constants launch nothing.
"""

import math
import re

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_SHAPE = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([0-9,]*)\]")
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_SILENT = {"bitcast", "get-tuple-element", "tuple", "parameter", "constant", "copy-start", "copy-done"}
_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")


def shape_bytes(text: str) -> int:
    """Bytes of every array shape written in `text` (a tuple's elements summed)."""
    return sum(_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d) for dtype, dims in _SHAPE.findall(text))


def _operands(rest: str) -> list[str]:
    """The %names between an instruction's opening parenthesis (already consumed) and its matching close."""
    depth, end = 1, len(rest)
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            end = i
            break
    return re.findall(r"%([\w.\-]+)", rest[:end])


def _kind(op: str, rest: str) -> str | None:
    if op in _SILENT:
        return None
    if op == "custom-call":
        return "gemm" if any(f'custom_call_target="{t}"' in rest for t in _GEMM_TARGETS) else "kernel"
    if op == "fusion":
        if re.search(r'"kind":"__(cublas|triton_gemm|triton_nested_gemm_fusion)', rest):
            return "gemm"
        if '"kind":"__triton"' in rest:
            return "triton fusion"
        fusion = re.search(r"kind=k(\w+)", rest)
        return f"{fusion.group(1).lower()} fusion" if fusion else "fusion"
    if op in ("dot", "convolution"):
        return "gemm"
    return op


def entry_launches(hlo_text: str) -> dict[str, dict]:
    """{kind: {"launches": n, "GiB": traffic}} of the ENTRY computation of an optimized HLO module's text."""
    start = hlo_text.find("\nENTRY")
    if start < 0:
        raise ValueError("hlo_text: expected an HLO module's text with an ENTRY computation")
    entry = hlo_text[start:].split("\n}\n", 1)[0].splitlines()[1:]
    sizes, totals = {}, {}
    for line in entry:
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        name, shape, op, rest = match.groups()
        sizes[name] = shape_bytes(shape)
        kind = _kind(op, rest)
        if kind is None:
            continue
        moved = sizes[name] + sum(sizes.get(operand, 0) for operand in _operands(rest))
        row = totals.setdefault(kind, {"launches": 0, "GiB": 0.0})
        row["launches"] += 1
        row["GiB"] += moved / 2**30
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]["GiB"]))
