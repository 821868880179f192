"""benchmarks/train_throughput.py: a compilation inside the timed steps is counted (its time is not a step's)."""

import jax
import jax.numpy as jnp

from benchmarks.train_throughput import CompileCounter, measure


def test_counter_sees_a_compilation_and_only_while_open():
    f = jax.jit(lambda x: jnp.sin(x) * 3)
    x = jnp.ones(5)
    with CompileCounter() as first:
        f(x).block_until_ready()
    with CompileCounter() as again:
        f(x).block_until_ready()  # cached: no compilation
    jax.jit(lambda x: x + 1)(x)  # closed: not counted
    assert len(first.seconds) == 1 and first.seconds[0] > 0
    assert again.seconds == []


def test_the_timed_steps_of_a_tiny_preset_compile_nothing():
    row = measure("gla-tiny", batch_size=1, seqlen=16, steps=2, warmup=1, peak_tflops=0, attn_impl=None)
    assert row["compiles_in_timed_steps"] == 0
    assert row["tokens_per_s"] > 0 and jnp.isfinite(row["loss"])
