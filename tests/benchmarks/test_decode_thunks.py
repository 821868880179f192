"""benchmarks/probes/decode_thunks.py: the thunk-sequence reader counts kernels inside and outside command buffers and
tells a host-driven while loop from one inside a command buffer (an excerpt of a real H200 dump, and variants);
a compile that dumps nothing is refused by name."""

import argparse

import pytest

from benchmarks.probes import decode_thunks
from benchmarks.probes.decode_thunks import thunk_summary

DUMP = """000: kCommandBuffer [source       | next=006 (1)]
    001: kCopy         [source | sink] kCopy
    004: kCustomKernel [source | sink] loop_broadcast_fusion grid: [1, 1, 1] threads: [16, 1, 1]
    005: kCustomKernel [source | sink] wrapped_transpose grid: [1024, 1, 1] threads: [128, 1, 1]
006: kWhile         [prev=000 (1) | next=044 (1)]
condition:
    007: kCustomKernel [source | sink] loop_compare_fusion grid: [1, 1, 1] threads: [1, 1, 1]
  body:
    000: kCommandBuffer [source | sink]
        008: kCustomKernel [source       | next=009 (1)] loop_select_fusion grid: [32, 1, 1]
        009: kCustomKernel [prev=008 (1) | next=010 (1)] fusion.96 grid: [1, 1, 1]
044: kCustomKernel  [prev=006 (1) | sink        ] input_transpose_fusion grid: [1, 1, 1]
"""


def test_counts_kernels_in_command_buffers_and_the_host_driven_loop():
    assert thunk_summary(DUMP) == {"kernels": 6, "kernels_in_command_buffers": 4, "command_buffers": 2,
                                   "host_while_loops": 1}


def test_a_loop_inside_a_command_buffer_is_not_host_driven():
    inside = "000: kCommandBuffer [source | sink]\n" + "\n".join("    " + line for line in DUMP.splitlines()[4:])
    got = thunk_summary(inside)
    assert got["host_while_loops"] == 0 and got["kernels_in_command_buffers"] == got["kernels"] == 4


def test_a_compile_that_dumps_nothing_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(decode_thunks.subprocess, "run", lambda *args, **kwargs: None)  # the child writes no dump
    args = argparse.Namespace(preset="gla-tiny", layers=0, rows=2, tokens=2, target="local")
    with pytest.raises(RuntimeError, match="no thunk sequence dumped under XLA_FLAGS='--flag --xla_dump_to="):
        decode_thunks.variant("--flag", args)
