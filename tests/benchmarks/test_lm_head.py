"""benchmarks/lm_head.py: each shape gives a record per impl, and the swept shape one per tiling (on a CPU, the
kernel interpreted)."""

import argparse
import json

import pytest

from benchmarks.lm_head import main, shapes


def test_each_shape_and_tiling_is_timed(tmp_path):
    out = tmp_path / "lm_head.jsonl"
    assert main(["--shapes", "2:64:96,1:32:48", "--sweep", "2", "--widths", "16,32", "--warps", "4", "--steps", "2",
                 "--copies", "2", "--repeats", "1", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["rows"], r["n"], r["impl"], r["width"]) for r in records] == [
        (2, 96, "xla", None), (2, 96, "pallas", None), (2, 96, "pallas", 16), (2, 96, "pallas", 32),
        (1, 48, "xla", None), (1, 48, "pallas", None)]
    assert all(r["us"] > 0 and r["gb_s"] == pytest.approx(r["d"] * r["n"] * 2 / r["us"] / 1e3) for r in records)


def test_shapes_are_rows_width_vocab_triples():
    assert shapes("2:2048:32000,1:64:48") == [(2, 2048, 32000), (1, 64, 48)]
    with pytest.raises(argparse.ArgumentTypeError, match="expected rows:D:N triples of positive integers"):
        shapes("2:2048")


def test_a_tiling_that_cannot_run_is_recorded_with_its_error(tmp_path):
    out = tmp_path / "lm_head.jsonl"
    assert main(["--shapes", "2:64:48", "--widths", "32", "--warps", "4", "--steps", "1", "--copies", "1",
                 "--repeats", "1", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["impl"] for r in records] == ["xla", "pallas", "pallas"] and "us" in records[1]
    assert "us" not in records[2] and "config: width 32 does not divide the vocabulary 48" in records[2]["error"]
