"""Training with sequences split over the mesh's `context` axis, the models with softmax attention (the
Transformer, a GLA hybrid with every attention option, a Gated DeltaNet hybrid with a window): the loss and every
gradient equal one device's (tests/train/context_parallel_step.py, 8 fake CPU devices in a process of its own),
the compiled steps all-gather only each attention layer's keys and values and the segment ids; the hybrids'
prefill from a cache, and a forward without segment ids, split the same way, equal one device's."""

from tests.train.context_parallel_step import run_and_check


def test_context_split_of_the_models_with_attention_equals_one_device():
    run_and_check("chunk", ("transformer", "gla-hybrid", "gdn-hybrid"))
