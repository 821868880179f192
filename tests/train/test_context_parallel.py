"""Training with sequences split over the mesh's `context` axis, the linear models (GLA, Gated DeltaNet, KDA, each
with CCQ): the loss and every gradient equal one device's (tests/train/context_parallel_step.py, 8 fake CPU
devices in a process of its own), the compiled steps all-gather nothing (only the shards' summaries and the
convolutions' halos move, by collective permutes), and a prefill from a cache split the same way equals one
device's; a config whose context axis does not divide the sequence is refused by name. The models with softmax
attention: tests/train/test_context_parallel_attention.py."""

import pytest

from tests.train.context_parallel_step import run_and_check
from tests.train.tiny_run import tiny_config


def test_context_split_of_the_linear_models_equals_one_device():
    run_and_check("chunk", ("ccq-gla", "ccq-gdn", "ccq-kda"))


def test_a_context_axis_that_does_not_divide_the_sequence_is_refused_by_name():
    with pytest.raises(ValueError, match=r"mesh.context: must divide data.seq_len=32 .* got 3"):
        tiny_config(mesh={"data": 1, "context": 3})
