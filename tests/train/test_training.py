"""End-to-end training: sharded == single device, SIGTERM + resume == uninterrupted, determinism,
two processes on one mesh, NaN handling, config errors (named runs, `--set` overrides, YAML files) naming the
field.

Each run is a separate process (tests/train/tiny_run.py) so device counts and jax.distributed
can be set before JAX starts.
"""

import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.train.tiny_run import tiny_config
from train.config import TrainConfig, fit_vocab
from train.loop import NonFiniteLoss, train
from train.metrics import read_metrics
from train.runs import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


COMPILE_CACHE = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ccq-test-compile-cache-{os.getpid()}")


def _start(workdir, devices=1, env=None, **changes):
    # the runs share compiled programs through JAX's persistent cache and skip most XLA passes (tiny models)
    environ = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
               "JAX_COMPILATION_CACHE_DIR": COMPILE_CACHE, "JAX_DISABLE_MOST_OPTIMIZATIONS": "true", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "tests.train.tiny_run", str(workdir), json.dumps(changes)],
                            env=environ, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=300):
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def _losses(workdir):
    return {row["step"]: row["loss"] for row in read_metrics(workdir / "metrics.jsonl")}


PALLAS = {"model_overrides": {"num_hidden_layers": 1, "hidden_size": 32, "kernel.impl": "pallas"}}
SHARDED = {"mesh": {"data": 2, "fsdp": 2, "tensor": 2}, "grad_accum": 2, "loss_chunk_len": 8}
CONTEXT = {"mesh": {"data": 2, "context": 4}, "model_overrides": {"num_hidden_layers": 1, "hidden_size": 32,
                                                                  "use_short_conv": True}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The reference run on 1 device, and the same run on a 2x2x2 mesh of 8 devices with 2 microbatches and the
    loss formed 8 positions at a time (sequences of 32); both again with the kernels (impl="pallas", interpreted);
    and the model with short convolutions on one device and with each sequence split over 4 devices."""
    base = tmp_path_factory.mktemp("runs")
    procs = {"single": _start(base / "single"), "sharded": _start(base / "sharded", devices=8, **SHARDED),
             "pallas_single": _start(base / "pallas_single", **PALLAS),
             "pallas_sharded": _start(base / "pallas_sharded", devices=8, **PALLAS, **SHARDED),
             "conv_single": _start(base / "conv_single", model_overrides=CONTEXT["model_overrides"]),
             "context": _start(base / "context", devices=8, **CONTEXT)}
    for proc in procs.values():
        _finish(proc)
    return {**{name: _losses(base / name) for name in procs}, "dir": base}


def test_sharded_mesh_with_accumulation_and_a_sliced_loss_matches_one_device(runs):
    single, sharded = runs["single"], runs["sharded"]
    assert sorted(single) == list(range(1, 9)) == sorted(sharded)
    np.testing.assert_allclose([sharded[s] for s in single], list(single.values()), rtol=2e-5)
    assert single[8] < single[1]


def test_a_run_with_sequences_split_over_the_context_axis_matches_one_device(runs):
    """mesh.context = 4: each device holds 8 of every sequence's 32 tokens (ops and short convolutions split the
    sequence, `ccq_jax.ops.sharding`); the batches are made on the device and scored at MQAR's positions."""
    single, split = runs["conv_single"], runs["context"]
    assert sorted(single) == list(range(1, 9)) == sorted(split)
    np.testing.assert_allclose([split[s] for s in single], list(single.values()), rtol=2e-5)
    assert single[8] < single[1]


def test_sharded_kernels_match_one_device_and_gather_no_kernel_operand(runs):
    """impl="pallas" on the 8-device mesh: each device runs the kernels on its own rows and heads
    (`ccq_jax.ops.sharding`), so the losses equal one device's, and the compiled step all-gathers none of the
    kernels' rank-4 operands (without the per-device shard_map it gathers 32 of them)."""
    single, sharded = runs["pallas_single"], runs["pallas_sharded"]
    assert sorted(single) == list(range(1, 9)) == sorted(sharded)
    np.testing.assert_allclose([sharded[s] for s in single], list(single.values()), rtol=2e-5)
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "true",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "-m", "tests.train.kernel_gathers"], env=env, cwd=ROOT, text=True,
                         capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "of rank-4 arrays 0:" in out.stdout, out.stdout


def test_sigterm_saves_and_resume_continues_the_exact_run(runs, tmp_path):
    workdir = tmp_path / "interrupted"
    # calls of 2 steps where the reference ran 2 per checkpoint: SIGTERM lands in the first call, which finishes
    proc = _start(workdir, steps=8, checkpoint_every=100, steps_per_call=2)
    banner = proc.stdout.readline()  # printed once the state is built, before the first call compiles
    assert "step 0 of 8" in banner, banner
    proc.send_signal(signal.SIGTERM)
    out = _finish(proc)
    first = _losses(workdir)
    assert "SIGTERM: saved step 2 " in out and sorted(first) == [1, 2], out[-2000:]
    # the same seed gives the same run: the steps before the interruption equal the reference
    assert all(first[s] == runs["single"][s] for s in first)

    _finish(_start(workdir, steps=8, checkpoint_every=100, steps_per_call=3))
    resumed = _losses(workdir)
    assert sorted(resumed) == list(range(1, 9))
    np.testing.assert_array_equal([resumed[s] for s in range(1, 9)], [runs["single"][s] for s in range(1, 9)])


def _text_data(tmp_path) -> dict:
    """The data config of a small JSONL corpus of random sentences (host batches on grain)."""
    corpus = tmp_path / "corpus.jsonl"
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    rng = np.random.default_rng(0)
    corpus.write_text("".join(json.dumps({"text": " ".join(rng.choice(words, rng.integers(5, 40)))}) + "\n"
                              for _ in range(64)))
    return {"source": "jsonl", "paths": [str(corpus)], "seq_len": 32, "batch_size": 4, "prefetch_batches": 2}


def test_host_batches_resume_the_exact_run(tmp_path):
    """Text on grain (the data iterator's position is checkpointed), several steps per call: an interrupted and
    resumed run equals an uninterrupted one with another call length."""
    data = _text_data(tmp_path)
    reference = _start(tmp_path / "reference", data=data, steps=6, checkpoint_every=0, steps_per_call=4)
    proc = _start(tmp_path / "interrupted", data=data, steps=6, checkpoint_every=100, steps_per_call=2)
    assert "step 0 of 6" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    assert "SIGTERM: saved step 2 " in _finish(proc)
    _finish(reference)
    _finish(_start(tmp_path / "interrupted", data=data, steps=6, checkpoint_every=100, steps_per_call=2))
    expected, resumed = _losses(tmp_path / "reference"), _losses(tmp_path / "interrupted")
    assert sorted(expected) == list(range(1, 7)) == sorted(resumed)
    np.testing.assert_array_equal([resumed[s] for s in expected], list(expected.values()))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_train_on_one_mesh(tmp_path):
    env = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{_free_port()}", "JAX_NUM_PROCESSES": "2"}
    data = _text_data(tmp_path)  # host batches: each process reads its own documents, sends its half of each call
    procs = [_start(tmp_path / "multi", env={**env, "JAX_PROCESS_ID": str(i)}, data=data, steps=4,
                    checkpoint_every=2, steps_per_call=3) for i in range(2)]
    try:
        outs = [_finish(p, timeout=240) for p in procs]
    finally:  # one process failing leaves the other waiting in a collective
        for p in procs:
            p.kill()
    summaries = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    assert summaries[0]["final_loss"] == summaries[1]["final_loss"]
    assert all(s["steps"] == 4 for s in summaries)
    losses = _losses(tmp_path / "multi")  # written by process 0 only
    assert sorted(losses) == [1, 2, 3, 4] and all(np.isfinite(list(losses.values())))
    assert (tmp_path / "multi" / "checkpoints" / "4").exists()


def test_non_finite_loss_stops_naming_the_step(tmp_path):
    cfg = tiny_config(optim={"lr": 1e30, "warmup_steps": 0, "grad_clip": 0.0}, steps=6, checkpoint_every=0)
    with pytest.raises(NonFiniteLoss, match=r"step \d: loss or gradient norm is not finite"):
        train(cfg, tmp_path, progress=False)


def test_non_finite_steps_are_skipped_and_reported(tmp_path, capsys):
    cfg = tiny_config(optim={"lr": 1e30, "warmup_steps": 0, "grad_clip": 0.0}, steps=4, checkpoint_every=0,
                      on_nan="skip")
    summary = train(cfg, tmp_path, progress=False)
    skipped = [line for line in capsys.readouterr().out.splitlines() if line.endswith("; step skipped")]
    assert summary["steps"] == 4 and skipped and skipped[0].startswith("step ")


@pytest.mark.parametrize("overrides,match", [
    ({"optim.lrr": 1.0}, r"optim\.lrr: unknown key \(did you mean 'lr'\?\)"),
    ({"optimm.lr": 1.0}, r"optimm: unknown key \(did you mean 'optim'\?\)"),
    ({"stepz": 3}, r"stepz: unknown key \(did you mean 'steps'\?\)"),
    ({"model": "gla-tinyy"}, r"model: unknown value 'gla-tinyy'; expected one of .* \(did you mean 'gla-tiny'\?\)"),
    ({"model.hidden_sise": 64}, r"model\.hidden_sise: unknown key \(did you mean 'hidden_size'\?\)"),
    ({"model.hidden_size": -3}, r"model\.hidden_size: expected an integer >= 1, got -3"),
    ({"steps": 0}, r"steps: expected >= 1, got 0"),
    ({"steps": 4}, r"optim\.warmup_steps: 5 is longer than the run \(steps=4\), .*expected optim\.warmup_steps <= steps"),
    ({"log_every": 0}, r"log_every: expected >= 1, got 0"),
    ({"steps_per_call": 0}, r"steps_per_call: expected >= 1, got 0"),
    ({"grad_accum": 3}, r"grad_accum: must divide data\.batch_size=32, got 3"),
    ({"eval_batches": -1}, r"eval_batches: expected >= 0, got -1"),
    ({"checkpoint_every": -1}, r"checkpoint_every: expected >= 0, got -1"),
    ({"keep_checkpoints": -1}, r"keep_checkpoints: expected >= 0, got -1"),
    ({"loss_chunk_len": -1}, r"loss_chunk_len: expected >= 0, got -1"),
    ({"peak_tflops": -1.0}, r"peak_tflops: expected a finite value >= 0 \(0: the device's known peak\), got -1\.0"),
    ({"on_nan": "ignore"}, r"on_nan: expected Literal\['stop', 'skip'\], got str 'ignore'"),
    ({"mesh.data": 0}, r"mesh: axis sizes must be positive or -1, got \{'data': 0, 'fsdp': 1, 'context': 1, 'tensor': 1\}"),
])
def test_config_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        load_config("smoke", overrides)


@pytest.mark.parametrize("text,match", [
    ("- demo\n", r"run\.yaml: expected a YAML mapping at the top level, got list"),
    ("runs: 3\n", r"runs: expected a list of run configs in .*run\.yaml, got int"),
    ("runs: [3]\n", r"TrainConfig: expected a mapping, got int"),
    ("steps: 5\noptim: {lrr: 1.0}\n", r"optim\.lrr: unknown key for OptimConfig \(did you mean 'lr'\?\)"),
])
def test_yaml_config_errors(tmp_path, text, match):
    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config(str(tmp_path / "run.yaml"))


def test_config_names_and_vocabulary_errors():
    with pytest.raises(ValueError, match=r"--config: expected a YAML file or one of "
                                         r"\['demo', 'mqar-tiny', 'pretrain-1.3b', 'smoke'\] "
                                         r"\(did you mean 'demo'\?\), got 'dmeo'"):
        load_config("dmeo")
    with pytest.raises(ValueError, match=r"model\.vocab_size: 32 cannot hold the ids of the data "
                                         r"\(data\.mqar\.vocab_size: ids up to 63\); expected model\.vocab_size "
                                         r">= 64, or leave it unset"):
        load_config("smoke", {"model.vocab_size": 32})  # its MQAR task uses 64 ids
    text = {"data.source": "text", "data.paths": ["corpus.txt"], "data.seq_len": 32}
    with pytest.raises(ValueError, match=r"model\.vocab_size: 256 cannot hold the ids of the data \(the byte "
                                         r"tokenizer, whose BOS is 256: ids up to 383\); expected model\.vocab_size "
                                         r">= 384"):
        load_config("smoke", {**text, "model.vocab_size": 256})
    assert fit_vocab(load_config("smoke", text)[0], 384).vocab_size == 384  # unset: the preset's grows
    cfg = load_config("smoke", {"model.vocab_size": 64})[0]  # a tokenizer.json's size is known when training starts
    with pytest.raises(ValueError, match=r"model\.vocab_size: 64 is smaller than the data's vocabulary 100"):
        fit_vocab(cfg, 100)


def test_cli_rejects_unknown_config_with_a_suggestion():
    out = subprocess.run([sys.executable, "-m", "train", "--config", "dmeo"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 2 and "did you mean 'demo'?" in out.stderr


def test_mesh_shape_errors():
    from train.sharding import MeshConfig

    assert MeshConfig(data=-1, tensor=2).shape(8) == (4, 1, 1, 2)
    assert MeshConfig(data=2, context=-1).shape(8) == (2, 1, 4, 1)
    with pytest.raises(ValueError, match=r"mesh: 8 devices do not split into \{'data': -1, 'fsdp': 1, 'context': 1, "
                                         r"'tensor': 3\}"):
        MeshConfig(data=-1, tensor=3).shape(8)
    with pytest.raises(ValueError, match=r"mesh: \{'data': 2, 'fsdp': 2, 'context': 1, 'tensor': 1\} needs 4 devices, "
                                         r"but 8 are available"):
        MeshConfig(data=2, fsdp=2, tensor=1).shape(8)
    with pytest.raises(ValueError, match=r"at most one axis may be -1"):
        MeshConfig(data=-1, fsdp=-1)
    with pytest.raises(ValueError, match=r"mesh\.data: expected int, got str '2'"):
        MeshConfig(data="2")
    assert isinstance(load_config("demo")[0], TrainConfig)
