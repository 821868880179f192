"""benchmarks/inference.py: every measurement of our side runs on a tiny preset, the cache per sequence stays
constant with the prompt for a linear model, and the table sets fla's times beside ours (CCQ presets against
their backbone)."""

import argparse
import ast
from pathlib import Path

import pytest

from benchmarks.inference import best_seconds, shapes, ours, table


def test_our_side_measures_each_kind_on_a_tiny_preset():
    records = ours("gla-tiny", "float32", [(1, 16)], [(1, 16)], [(2, 8), (2, 32)], tokens=3, repeats=1,
                   hbm_tb_s=1.0)
    assert [r["what"] for r in records] == ["split", "prefill", "prefill, re-split", "decode", "generate",
                                            "generate"]
    assert all(r["ms"] > 0 for r in records)
    decode = records[3]
    assert decode["state_floor_ms"] > decode["floor_ms"] > 0
    short, long = records[4:]
    assert short["cache_bytes_per_sequence"] == long["cache_bytes_per_sequence"] > 0
    assert short["tokens_per_s"] == pytest.approx(2 * 3 / (short["ms"] / 1e3))


def test_the_table_puts_fla_beside_ours():
    mine = {"side": "ours", "batch": 1, "prompt": 8}
    records = [{**mine, "preset": "gla-x", "what": "prefill", "ms": 3.0},
               {**mine, "preset": "ccq-gla-x", "what": "decode", "ms": 2.0, "floor_ms": 0.5},
               {"side": "fla", "preset": "gla-x", "what": "prefill", "batch": 1, "prompt": 8, "ms": 6.0},
               {"side": "fla", "preset": "gla-x", "what": "decode", "batch": 1, "prompt": 8, "ms": 4.0},
               {"side": "fla", "preset": "gla-x", "what": "decode, HF generate", "batch": 1, "prompt": 8, "ms": 30.0}]
    text = table(records)
    assert "| gla-x | prefill | 1 | 8 | 3.00 | 6.00 | 0.50 | - | - | - |" in text
    assert "| ccq-gla-x | decode | 1 | 8 | 2.00 | 4.00 | 0.50 | 30.00 | 0.500 | - |" in text


def test_shapes_are_batch_prompt_pairs():
    assert shapes("1:2048,16:512") == [(1, 2048), (16, 512)]
    with pytest.raises(argparse.ArgumentTypeError, match="expected B:P pairs of positive integers, got '0:5'"):
        shapes("0:5")


def test_the_fla_side_defines_what_the_script_imports():
    """benchmarks/inference_fla.py needs torch and CUDA, so no CPU test runs it: its name is checked here."""
    source = (Path(__file__).resolve().parents[2] / "benchmarks" / "inference_fla.py").read_text()
    assert "fla_records" in {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def test_the_timer_waits_on_the_warm_up_and_on_every_timed_run():
    waited = []
    assert best_seconds(lambda: len(waited), 3, wait=waited.append) >= 0
    assert waited == [0, 1, 2, 3]
