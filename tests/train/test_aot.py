"""`ccq-compile` on this machine (no TPU): a config's train call compiles on the CPU's own devices and its row says
so; a TPU topology's kernels are the Mosaic ones, compiled; names it does not know are ValueErrors that say which.
The compiles for TPU topologies (libtpu) are in tests/train/test_aot_tpu.py (`-m tpu_aot`)."""

import json

import pytest

from ccq_jax.layers.kernel_policy import TPU_KERNELS
from ccq_jax.models import get_config
from train.aot import failure, for_tpu, main, table, topology_devices


def test_smoke_config_compiles_on_this_machine_and_writes_its_row(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert main(["--config", "smoke", "--out", str(out), "--set", "data.batch_size=4"]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["compiled"] and row["topology"] is None and row["name"] == "gla-tiny"
    assert row["params"] > 0 and row["batch_size"] == 4 and row["argument_gib"] > 0
    assert row["total_gib"] >= row["argument_gib"] - row["alias_gib"]
    assert "gla-tiny" in capsys.readouterr().out


def test_a_run_that_does_not_compile_is_a_row_with_its_error():
    row = {"name": "x", "chips": 4, "mesh": {"data": 1, "fsdp": 4}, "compiled": False, "error": "RESOURCE_EXHAUSTED"}
    text = table([row])
    assert "x: did not compile: RESOURCE_EXHAUSTED" in text and "1x4" in text


@pytest.mark.parametrize("impl", ["pallas", TPU_KERNELS])
def test_for_tpu_compiles_the_mosaic_kernels(impl):
    cfg = for_tpu(get_config("ccq-gdn-tiny", **{"kernel.impl": impl}))
    assert cfg.kernel.impl == TPU_KERNELS and cfg.kernel.interpret is False


def test_for_tpu_keeps_references_and_refuses_gpu_kernels():
    assert for_tpu(get_config("gla-tiny")).kernel.impl == "chunk"
    assert for_tpu(get_config("transformer-tiny")) == get_config("transformer-tiny")
    with pytest.raises(ValueError, match="model.kernel.impl: 'pallas_triton' has no TPU kernels"):
        for_tpu(get_config("gla-tiny", **{"kernel.impl": "pallas_triton"}))


@pytest.mark.parametrize("model", ["transformer-tiny", "gdn-hybrid-tiny"])
def test_for_tpu_compiles_splash_attention_whatever_the_linear_impl(model):
    """sdpa_impl="splash" takes kernel.interpret: compiled for a TPU it is False, also where the linear reads stay
    on XLA's chunk form (else the TPU program would hold the interpreter's loops, not the kernel)."""
    cfg = for_tpu(get_config(model, sdpa_impl="splash"))
    assert cfg.kernel.impl == get_config(model).kernel.impl and cfg.kernel.interpret is False
    assert get_config(model, sdpa_impl="splash", **{"kernel.interpret": False}).kernel.interpret is False


def test_interpret_is_refused_where_no_impl_runs_kernels():
    with pytest.raises(ValueError, match="kernel.interpret: kernel.impl='chunk', kernel.decode_impl='recurrent', "
                                         "kernel.head_impl='xla' run no kernels"):
        get_config("gla-tiny", **{"kernel.impl": "chunk", "kernel.interpret": False})
    policy = get_config("gla-tiny", **{"kernel.decode_impl": "pallas", "kernel.interpret": False}).kernel
    assert policy.impl == "chunk" and policy.interpret is False


def test_an_unknown_topology_says_what_a_topology_looks_like():
    with pytest.raises(ValueError, match="--topology: cannot make TPU topology 'v9z:1x1'.*v5p:2x2x1"):
        topology_devices("v9z:1x1")


def test_unknown_run_names_are_usage_errors(capsys):
    with pytest.raises(SystemExit):
        main(["--config", "pretrain-1.3b", "--only", "gla-13b"])
    assert "--only: expected names of this config's runs" in capsys.readouterr().err


def test_a_run_out_of_hbm_reports_what_its_temporaries_needed():
    message = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (111.88G) "
               "exceeds available HBM (95.73G). HLO module: jit_on_mesh.\nmore lines")
    fields = failure(RuntimeError(message), 95.0)
    assert fields["temp_gib"] == pytest.approx(111.88) and fields["fits"] is False and not fields["compiled"]
    assert fields["error"] == message.splitlines()[0]
    other = failure(ValueError("Mosaic failed to compile"), None)
    assert "temp_gib" not in other and "fits" not in other and other["error"] == "Mosaic failed to compile"
