"""`ccq-compile` for a TPU topology (libtpu's compiler on a CPU; `-m tpu_aot`, JAX_PLATFORMS=cpu, the `tpu` extra):
a small linear-attention run's whole train call, FSDP over a v5e-4's chips, compiles with the Mosaic TPU kernels
inside the per-device shard_map (three kernel calls per layer for a backbone, six with CCQ; the tiny presets have
two layers, unrolled), and its per-chip memory fits; the same with each sequence split over the chips (mesh.context);
splash attention; and one layer of ccq-gdn2-1.3b, which libtpu once aborted compiling."""

import json
import os
import subprocess
import sys

import pytest

from ccq_jax.models import get_config
from train.aot import TPU_HBM_GIB, compile_run, topology_devices
from train.runs import load_config

pytestmark = pytest.mark.tpu_aot
KERNEL_CALLS = {"gla-tiny": 3, "ccq-gdn-tiny": 6, "gdn2-tiny": 3, "ccq-kda-tiny": 6}
# per layer: forward, states, backward (the delta rules: the state pass forward, its recompute, its backward); CCQ
# adds the read's three


@pytest.mark.parametrize("model", sorted(KERNEL_CALLS))
def test_a_sharded_train_call_compiles_for_a_tpu_topology(model):
    pytest.importorskip("libtpu")
    devices = topology_devices("v5e:2x2")
    (run,) = load_config("smoke", {"model": model, "model.kernel.impl": "pallas", "mesh.data": 1,
                                   "mesh.fsdp": -1, "data.batch_size": 8, "steps_per_call": 2})
    row = compile_run(run, devices, tpu=True)
    assert row["compiled"], row.get("error")
    assert row["mesh"] == {"data": 1, "fsdp": 4, "context": 1, "tensor": 1} and row["kernel_impl"] == "pallas_mosaic_tpu"
    assert row["kernel_calls"] == KERNEL_CALLS[model] * get_config(model).num_hidden_layers
    assert row["hbm_gib"] == TPU_HBM_GIB["TPU v5 lite"] and row["fits"] and 0 < row["total_gib"] < 1


@pytest.mark.parametrize("model", sorted(KERNEL_CALLS))
def test_a_context_split_train_call_compiles_for_a_tpu_topology(model):
    """mesh.context = 4: each chip holds a quarter of every sequence (`ccq_jax.ops.sharding`); the summaries
    run the backbone's three kernel calls once more per layer, beside the collective permutes."""
    pytest.importorskip("libtpu")
    (run,) = load_config("smoke", {"model": model, "model.kernel.impl": "pallas", "mesh.data": 1, "mesh.context": 4,
                                   "data.batch_size": 8, "steps_per_call": 2})
    row = compile_run(run, topology_devices("v5e:2x2"), tpu=True)
    assert row["compiled"], row.get("error")
    assert row["mesh"] == {"data": 1, "fsdp": 1, "context": 4, "tensor": 1} and row["fits"]
    assert row["kernel_calls"] == (KERNEL_CALLS[model] + 3) * get_config(model).num_hidden_layers


@pytest.mark.parametrize("model", ["ccq-gdn-tiny", "ccq-kda-tiny"])
def test_dots_remat_compiles_with_no_kernel_run_twice(model):
    """remat_policy "dots" (`ccq_jax.layers.remat`: each block keeps its matmuls' outputs and `ccq_jax.ops.KEPT`)
    compiles with the Mosaic calls of the default policy: no forward kernel runs again in the backward pass (the
    read's covariance output, untagged, made the read's GLA kernel run twice a layer)."""
    pytest.importorskip("libtpu")
    (run,) = load_config("smoke", {"model": model, "model.kernel.impl": "pallas", "model.remat_policy": "dots",
                                   "mesh.data": 1, "mesh.fsdp": -1, "data.batch_size": 8, "steps_per_call": 2})
    row = compile_run(run, topology_devices("v5e:2x2"), tpu=True)
    assert row["compiled"], row.get("error")
    assert row["kernel_calls"] == KERNEL_CALLS[model] * get_config(model).num_hidden_layers and row["fits"]


def test_a_hybrid_train_call_with_splash_attention_compiles_for_a_tpu_topology():
    """gdn-hybrid-tiny (a windowed attention layer among three Gated DeltaNet layers) with sdpa_impl="splash", FSDP
    over a v5e-4's chips: the splash kernels (forward, dkv, dq) run on each chip's rows beside the backbone's."""
    pytest.importorskip("libtpu")
    (run,) = load_config("smoke", {"model": "gdn-hybrid-tiny", "model.kernel.impl": "pallas",
                                   "model.sdpa_impl": "splash", "mesh.data": 1, "mesh.fsdp": -1,
                                   "data.batch_size": 8, "steps_per_call": 2})
    row = compile_run(run, topology_devices("v5e:2x2"), tpu=True)
    assert row["compiled"], row.get("error")
    assert row["mesh"]["fsdp"] == 4 and row["fits"]
    assert row["kernel_calls"] == 3 * 3 + 3  # three Gated DeltaNet layers, one attention layer


@pytest.mark.parametrize("model", ["transformer-tiny", "gdn-hybrid-tiny"])
def test_splash_attention_compiles_for_a_tpu_topology_beside_the_chunk_form(model):
    """sdpa_impl="splash" with the linear reads on XLA's chunk form (kernel.impl left at "chunk"): only the splash
    kernels (forward, dkv, dq per attention layer) are kernel calls, compiled, not interpreted."""
    pytest.importorskip("libtpu")
    (run,) = load_config("smoke", {"model": model, "model_overrides": {"sdpa_impl": "splash"}, "mesh.data": 1,
                                   "mesh.fsdp": -1, "data.batch_size": 8, "steps_per_call": 2})
    row = compile_run(run, topology_devices("v5e:2x2"), tpu=True)
    assert row["compiled"], row.get("error")
    attention_layers = 2 if model == "transformer-tiny" else 1
    assert row["kernel_calls"] == 3 * attention_layers and row["fits"]


def test_ccq_gdn2_with_the_kernels_under_block_remat_compiles_where_libtpu_used_to_abort(tmp_path):
    """pretrain-1.3b's ccq-gdn2-1.3b cut to one unscanned layer and 4 rows of 4096 (the kernels, block remat): libtpu
    0.0.48.1 aborted the process compiling this ("split of a padded window dim is not supported", docs/tpu.md) while
    the chunk factors formed the per-channel pairwise decay whole; it compiles since `diagonal_scores` forms it a key
    position at a time. In a process of its own, so that an abort fails this test instead of killing the worker."""
    pytest.importorskip("libtpu")
    rows = tmp_path / "rows.jsonl"
    smaller = ["model.num_hidden_layers=1", "model.scan_layers=false", "data.batch_size=4", "grad_accum=1"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    out = subprocess.run([sys.executable, "-m", "train.aot", "--config", "pretrain-1.3b", "--only", "ccq-gdn2-1.3b",
                          "--topology", "v5p:2x2x1", "--out", str(rows), *(f"--set={s}" for s in smaller)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["compiled"] and row["fits"], row
