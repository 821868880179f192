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


def test_runs_the_kernels_at_a_head_shape_of_its_own():
    """--shape H,K,V: the 100m GLA's K = 128, V = 256 instead of the 1.3B shape (here a small one, interpreted)."""
    rows = breakdown(1, 64, 1, [("default",) * 3], ["gla"], kernels=["chunk_dqk"], shape={"H": 1, "K": 32, "V": 64})
    assert [r["kernel"] for r in rows] == ["chunk_dqk", "cov chunk_dqk (keys' gradient of both uses)"]
    assert all(math.isfinite(r["ms"]) for r in rows)
