"""benchmarks/kernels.py --breakdown on the CPU (interpret mode, one chunk): the harness still calls every kernel
it names with the kernels' current signatures, `--kernels` times only the kernels named, and a tiling override
is undone afterwards (the sweep patches the kernel modules while it runs)."""

import math

from benchmarks.kernels import breakdown
from pallas_kernels import _tiles, delta_rule
from pallas_kernels import linear_attention as la


def test_times_only_the_kernels_named_and_restores_the_kernels_own_tilings():
    rows = breakdown(1, 64, 1, [(32, 2, 1)], ["gla", "gdn"], kernels=["chunk_dscores", "delta_states"])
    assert sorted((r["family"], r["kernel"]) for r in rows) == [
        ("gdn", "chunk_dscores"), ("gdn", "delta_states"), ("gla", "chunk_dscores")]
    assert all(math.isfinite(r["ms"]) and (r["width"], r["warps"], r["stages"]) == (32, 2, 1) for r in rows)
    assert la.launch is _tiles.launch and delta_rule.launch is _tiles.launch
    assert la.block(256) == 64 and delta_rule.block is la.block
