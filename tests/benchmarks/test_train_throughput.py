"""benchmarks/train_throughput.py: a compilation inside the timed steps is counted (its time is not a step's);
the planned memory comes from the executable already compiled, here or for a deviceless GPU."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks.train_throughput import main, measure, planned_memory
from benchmarks.tools.compilation import CompileCounter


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
    assert row["planned_GiB"] >= row["arguments_GiB"] > 0
    assert row["first_step_s"] > 0 and row["xla_compile_s"] > 0  # the warm-up step compiled


def test_the_scanned_layers_train_the_same_step():
    rows = [measure("gla-tiny", batch_size=1, seqlen=16, steps=1, warmup=1, peak_tflops=0, attn_impl=None,
                    scan_layers=scan) for scan in (False, True)]
    assert [r["scan_layers"] for r in rows] == [False, True]
    # bf16 compute (the benchmark's): the loss after one update agrees to bf16 round-off; the fp32 equality of
    # the two forms is tests/models/test_scan_layers.py's
    assert abs(rows[0]["loss"] - rows[1]["loss"]) < 1e-3 * abs(rows[0]["loss"])


def test_the_plan_reuses_the_compiled_step_and_counts_donation():
    step = jax.jit(lambda state, batch: (state * 2 + batch.sum(), state.sum()), donate_argnums=0)
    state, batch = jnp.ones((256, 256)), jnp.ones((1024,))
    state, _ = step(state, batch)
    with CompileCounter() as compiles:
        plan = planned_memory(step, state, batch)
    assert compiles.seconds == []
    mib = 2.0**-10  # GiB per MiB: the state is 0.25 MiB, the batch 4 KiB, the donated state's output aliases it
    assert abs(plan["arguments_GiB"] - (0.25 + 1 / 256) * mib) < 1e-9
    assert plan["planned_GiB"] >= plan["arguments_GiB"] + plan["temporaries_GiB"]
    assert plan["planned_GiB"] < plan["arguments_GiB"] + 0.25 * mib + plan["temporaries_GiB"]  # the alias is saved


def test_a_deviceless_gpu_plans_the_step_without_building_it():
    kw = dict(batch_size=2, seqlen=128, steps=1, warmup=0, peak_tflops=0, attn_impl="pallas", memory_only=True)
    try:
        row = measure("gla-tiny", target="h200", **kw)
    except ValueError as error:  # the gpu extra is not installed here (CI)
        assert "needs JAX's CUDA plugin (pip install -e '.[gpu]')" in str(error)
        return
    assert (row["backend"], row["device_kind"], row["target"]) == ("gpu", "NVIDIA H200", "h200")
    local = measure("gla-tiny", **kw)
    # the same state and batch (parameters and AdamW moments: what the platform does not change), the GPU's own plan
    assert row["arguments_GiB"] == pytest.approx(local["arguments_GiB"], rel=1e-6)
    assert row["planned_GiB"] >= row["arguments_GiB"] + row["temporaries_GiB"] - 1e-9 and row["temporaries_GiB"] > 0


def test_a_deviceless_target_only_plans(capsys):
    with pytest.raises(ValueError, match=r"target: a deviceless 'h200' compiles without running; expected "
                                         r"memory_only=True"):
        measure("gla-tiny", batch_size=1, seqlen=16, steps=1, warmup=0, peak_tflops=0, attn_impl=None, target="h200")
    with pytest.raises(SystemExit) as exit_:
        main(["--presets", "gla-tiny", "--target", "h200"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: --target h200: a deviceless target compiles without running; expected --memory-only")


def test_the_attention_backend_reaches_the_hybrid_s_attention_layers():
    kw = dict(batch_size=1, seqlen=16, steps=1, warmup=0, peak_tflops=0, attn_impl=None, memory_only=True)
    assert measure("gla-hybrid-tiny", **kw)["sdpa_impl"] is None  # the preset's
    assert measure("gla-hybrid-tiny", sdpa_impl="xla", **kw)["sdpa_impl"] == "xla"
    with pytest.raises(RuntimeError, match="cuDNN is not detected"):  # on a CPU: the override got to the layers
        measure("gla-hybrid-tiny", sdpa_impl="cudnn", **kw)
