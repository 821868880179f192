"""benchmarks/kernels.py --breakdown on the CPU (interpret mode, one chunk): the harness still calls every kernel
it names with the kernels' current signatures and a `KernelConfig` per tiling, and `--kernels` times only the
kernels named; the KDA family's ops run through its timing on their kernels."""

import math
import sys

import pytest

from benchmarks.kernels import OURS, bench_inputs, breakdown, main, time_ours


def test_the_breakdown_refuses_the_kda_family_by_name(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["kernels.py", "--breakdown", "--families", "kda"])
    with pytest.raises(SystemExit):
        main()
    assert "--families: the breakdown times GLA's and Gated DeltaNet's kernels; leave kda out of it" in \
        capsys.readouterr().err


def test_times_kda_and_its_ccq_read_on_the_kernels():
    x = bench_inputs("kda", 1, 64, shape={"H": 1, "K": 16, "V": 16})
    assert x["g"].shape == (1, 64, 1, 16) and x["beta"].shape == (1, 64, 1)  # per channel; beta per head
    for op in OURS["kda"]:
        r = time_ours(op, "pallas", x, reps=1)
        assert all(math.isfinite(r[key]) and r[key] > 0 for key in ("fwd_ms", "fwdbwd_ms", "peak_gib")), (op, r)


def test_times_only_the_kernels_named_at_each_tiling():
    rows = breakdown(1, 64, 1, [(32, 2, 1)], ["gla", "gdn"], kernels=["chunk_dscores", "delta_states"])
    assert sorted((r["family"], r["kernel"]) for r in rows) == [
        ("gdn", "chunk_dscores"), ("gdn", "delta_states"), ("gla", "chunk_dscores")]
    assert all(math.isfinite(r["ms"]) and (r["width"], r["warps"], r["stages"]) == (32, 2, 1) for r in rows)


def test_runs_the_kernels_at_a_head_shape_of_its_own():
    """--shape H,K,V: the 100m GLA's K = 128, V = 256 instead of the 1.3B shape (here a small one, interpreted)."""
    rows = breakdown(1, 64, 1, [("default",) * 3], ["gla"], kernels=["chunk_dqk"], shape={"H": 1, "K": 32, "V": 64})
    assert [r["kernel"] for r in rows] == ["chunk_dqk", "cov chunk_dqk (keys' gradient of both uses)"]
    assert all(math.isfinite(r["ms"]) for r in rows)
