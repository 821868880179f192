"""benchmarks/inference.py: every measurement of our side runs on a tiny preset, the cache per sequence stays
constant with the prompt for a linear model, and the table sets fla's times beside ours (CCQ presets against
their backbone)."""

import argparse
import ast
import json
from pathlib import Path

import pytest

from benchmarks.inference import best_seconds, best_times, kernel_summary, main, ours, table
from benchmarks.inference_kernels import shapes


def test_our_side_measures_each_kind_on_a_tiny_preset():
    records = list(ours("gla-tiny", "float32", [(1, 16)], [(1, 16)], [(2, 8), (2, 32)], tokens=3, repeats=1,
                        hbm_tb_s=1.0, decode_impls=("recurrent", "pallas"), head_impls=("xla", "pallas")))
    assert [r["what"] for r in records] == ["split", "prefill", "prefill, re-split", "decode", "decode", "decode",
                                            "generate", "generate"]
    assert all(r["ms"] > 0 for r in records) and all(r["attn_impl"] == "chunk" for r in records)
    assert all(0 < r["host_ms"] for r in records[1:3])
    decode = records[3]
    assert decode["state_floor_ms"] > decode["floor_ms"] > 0 and decode["rows"] == 1  # one row runs as one on a CPU
    # the one-token kernels and the row-matmul head, interpreted
    assert [(r["decode_impl"], r["head_impl"]) for r in records[3:6]] == [
        ("recurrent", "xla"), ("pallas", "xla"), ("recurrent", "pallas")]
    short, long = records[6:]
    assert short["cache_bytes_per_sequence"] == long["cache_bytes_per_sequence"] > 0
    assert short["tokens_per_s"] == pytest.approx(2 * 3 / (short["ms"] / 1e3))


def test_the_table_puts_fla_beside_ours():
    mine = {"side": "ours", "batch": 1, "prompt": 8}
    records = [{**mine, "preset": "gla-x", "what": "prefill", "ms": 3.0},
               {**mine, "preset": "ccq-gla-x", "what": "decode", "ms": 2.0, "floor_ms": 0.5},
               {**mine, "preset": "gla-x", "what": "decode", "rows": 2, "ms": 1.0, "floor_ms": 0.5},
               {**mine, "preset": "gla-x", "what": "decode", "decode_impl": "pallas", "ms": 0.8, "floor_ms": 0.5},
               {**mine, "preset": "gla-x", "what": "decode", "decode_impl": "recurrent", "head_impl": "pallas",
                "ms": 0.6, "floor_ms": 0.5},
               {"side": "fla", "preset": "gla-x", "what": "prefill", "batch": 1, "prompt": 8, "ms": 6.0},
               {"side": "fla", "preset": "gla-x", "what": "decode", "batch": 1, "prompt": 8, "ms": 4.0},
               {"side": "fla", "preset": "gla-x", "what": "decode, HF generate", "batch": 1, "prompt": 8, "ms": 30.0}]
    text = table(records)
    assert "| gla-x | prefill | 1 | 8 | 3.00 | 6.00 | 0.50 | - | - | - |" in text
    assert "| ccq-gla-x | decode | 1 | 8 | 2.00 | 4.00 | 0.50 | 30.00 | 0.500 | - |" in text
    assert "| gla-x | decode, 2 rows run | 1 | 8 | 1.00 | 4.00 | 0.25 | 30.00 | 0.500 | - |" in text
    assert "| gla-x | decode, pallas step | 1 | 8 | 0.80 | 4.00 | 0.20 | 30.00 | 0.500 | - |" in text
    assert "| gla-x | decode, pallas head | 1 | 8 | 0.60 | 4.00 | 0.15 | 30.00 | 0.500 | - |" in text


def test_decode_and_head_impls_are_checked_before_anything_is_built():
    with pytest.raises(ValueError, match=r"decode_impls: expected one or more of .*, got \['fused'\]"):
        ours("gla-tiny", "float32", [], [], [], tokens=1, repeats=1, hbm_tb_s=1.0, decode_impls=("fused",))
    with pytest.raises(ValueError, match=r"head_impls: expected one or more of \('xla', 'pallas'\), got \['cublas'\]"):
        ours("gla-tiny", "float32", [], [], [], tokens=1, repeats=1, hbm_tb_s=1.0, head_impls=("cublas",))


def test_shapes_are_batch_prompt_pairs():
    assert shapes("1:2048,16:512") == [(1, 2048), (16, 512)]
    assert shapes("") == []  # none of that kind
    with pytest.raises(argparse.ArgumentTypeError, match="expected B:P pairs of positive integers, got '0:5'"):
        shapes("0:5")


def test_the_fla_side_defines_what_the_script_imports():
    """benchmarks/inference_fla.py needs torch and CUDA, so no CPU test runs it: its name is checked here."""
    source = (Path(__file__).resolve().parents[2] / "benchmarks" / "inference_fla.py").read_text()
    assert "fla_records" in {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def test_the_host_timer_stops_before_waiting():
    events = []
    assert best_times(lambda: events.append("run") or len(events), 2, wait=lambda _: events.append("wait"))[1] >= 0
    assert events == ["run", "wait"] * 3


def test_the_timer_waits_on_the_warm_up_and_on_every_timed_run():
    waited = []
    assert best_seconds(lambda: len(waited), 3, wait=waited.append) >= 0
    assert waited == [0, 1, 2, 3]


def _track(pid, tid, process, thread):
    return [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}]


def test_the_decode_profile_counts_gpu_kernels_per_token_by_kind():
    events = _track(1, 7, "/device:GPU:0", "Stream #13(Compute)") + _track(2, 1, "/host:CPU", "python")
    kernels = [("nvjet_hsh_128x64", 30.0), ("loop_multiply_fusion", 4.0), ("input_reduce_fusion", 6.0),
               ("triton_gla_decode", 10.0)] * 4  # 4 tokens
    # each kernel starts 20 us after the previous one started: 15 gaps of 20 us, then the last one's 10 us
    events += [{"ph": "X", "pid": 1, "tid": 7, "name": n, "dur": d, "ts": 100.0 + 20 * i}
               for i, (n, d) in enumerate(kernels)]
    events += [{"ph": "X", "pid": 2, "tid": 1, "name": "PjitFunction(decode)", "dur": 9e3, "ts": 0.0}]  # host
    got = kernel_summary(events, tokens=4)
    assert got["kernels_per_token"] == 4
    assert got["kernel_ms_per_token"] == pytest.approx(0.050)
    assert got["span_ms_per_token"] == pytest.approx((15 * 20 + 10) / 1e3 / 4)
    assert list(got["top_kernels_us_per_token"].items()) == [
        ("nvjet_hsh_128x64", 30.0), ("triton_gla_decode", 10.0), ("input_reduce_fusion", 6.0),
        ("loop_multiply_fusion", 4.0)]
    assert got["by_kind_ms"] == pytest.approx({"matmul": 0.030, "fusion": 0.010, "pallas/other": 0.010})


def test_the_decode_profile_is_refused_off_a_gpu():
    with pytest.raises(ValueError, match="profile: the profiles read GPU kernels; expected a GPU backend"):
        ours("gla-tiny", "float32", [], [(1, 8)], [], tokens=2, repeats=1, hbm_tb_s=1.0, profile=True)


def test_the_decode_step_ops_are_counted_per_batch_and_layer():
    records = list(ours("gla-tiny", "float32", [], [(1, 8), (2, 8)], [], tokens=2, repeats=1, hbm_tb_s=1.0,
                        count_ops=True))
    counted = [r for r in records if r["what"] == "decode step ops"]
    assert [r["batch"] for r in counted] == [1, 2]
    for r in counted:
        assert r["by_op"].get("dot", 0) + r["by_op"].get("fusion", 0) > 0 and r["ops"] == sum(r["by_op"].values())
        assert r["per_layer"] == r["ops"] / 2  # gla-tiny has 2 layers
        assert r["bytes"] > 0


def test_the_command_refuses_no_tokens_or_repeats(capsys):
    with pytest.raises(SystemExit):
        main(["--presets", "gla-tiny", "--tokens", "0"])
    assert "--tokens and --repeats: expected >= 1, got 0 and 3" in capsys.readouterr().err


def _stopped_after_one(*args, **kwargs):
    yield {"side": "ours", "preset": "gla-tiny", "what": "prefill", "batch": 1, "prompt": 8, "ms": 1.0}
    raise TimeoutError("the call's time limit")


def test_each_record_is_kept_as_it_is_measured(tmp_path, monkeypatch):
    out = tmp_path / "inference.jsonl"
    monkeypatch.setattr("benchmarks.inference.ours", _stopped_after_one)
    with pytest.raises(TimeoutError):
        main(["--presets", "gla-tiny", "--out", str(out)])
    assert [json.loads(line)["what"] for line in out.read_text().splitlines()] == ["prefill"]


def test_the_table_of_earlier_runs_reads_their_files(tmp_path, capsys):
    ours_file, fla_file = tmp_path / "ours.jsonl", tmp_path / "fla.jsonl"
    ours_file.write_text(json.dumps({"side": "ours", "preset": "gla-x", "what": "prefill", "batch": 1, "prompt": 8,
                                     "ms": 3.0}) + "\n")
    fla_file.write_text(json.dumps({"side": "fla", "preset": "gla-x", "what": "prefill", "batch": 1, "prompt": 8,
                                    "ms": 6.0}) + "\n")
    assert main(["--table", str(ours_file), str(fla_file)]) == 0
    assert "| gla-x | prefill | 1 | 8 | 3.00 | 6.00 | 0.50 | - | - | - |" in capsys.readouterr().out
