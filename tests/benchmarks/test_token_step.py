"""benchmarks/probes/token_step.py: every op and tiling gives a record per row count (on a CPU, the kernels
interpreted)."""

import json

from benchmarks.probes.token_step import main


def test_each_op_and_tiling_is_timed(tmp_path):
    out = tmp_path / "token_step.jsonl"
    assert main(["--ops", "gla,ccq_gla,gated_delta_rule", "--rows", "2", "--widths", "16", "--warps", "4",
                 "--steps", "2", "--repeats", "1", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["op"], r["impl"], r["width"]) for r in records] == [
        (op, impl, width) for op in ("gla", "ccq_gla", "gated_delta_rule")
        for impl, width in (("recurrent", None), ("pallas", 16))]
    assert all(r["us_per_step"] > 0 and r["rows"] == 2 and r["steps"] == 2 for r in records)
