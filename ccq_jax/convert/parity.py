"""Parity of our logits with PyTorch's: the metrics, and fla's logits from a separate Python process.

`torch_logits` runs `python ccq_jax/torch_reference logits ...` with the given interpreter (one
with torch and fla; JAX is not needed there) and returns fp32 logits; the process exits before
ours run, so the two frameworks never share a GPU's memory at the same time. With
`tf32=False` an fp32 comparison is fp32 on a GPU: Triton's `tl.dot` (fla's kernels) is told to
use IEEE fp32 (`TRITON_F32_DEFAULT=ieee`), and `matmul_precision` gives JAX's side the same.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import ccq_jax

TORCH_SIDE = Path(ccq_jax.__file__).resolve().parent / "torch_reference"


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def logit_metrics(ours, reference) -> dict:
    """max / mean |ours - reference|, relative RMS, KL(reference || ours) averaged over tokens (nats),
    and the fraction of tokens whose top-1 prediction agrees. Computed in float64."""
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    if ours.shape != reference.shape:
        raise ValueError(f"logits: shapes differ, ours {ours.shape} vs reference {reference.shape}")
    diff = np.abs(ours - reference)
    log_p, log_q = _log_softmax(reference), _log_softmax(ours)
    return {
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "rel_rms": float(np.linalg.norm(ours - reference) / max(np.linalg.norm(reference), 1e-30)),
        "kl": float((np.exp(log_p) * (log_p - log_q)).sum(-1).mean()),
        "top1_agreement": float((ours.argmax(-1) == reference.argmax(-1)).mean()),
    }


def _ieee_fp32(dtype: str, tf32: bool) -> bool:
    """Whether a comparison in `dtype` asks both sides for IEEE fp32 matmuls: fp32 unless TF32 is allowed."""
    return dtype == "float32" and not tf32


def matmul_precision(dtype: str, tf32: bool) -> str:
    """JAX's matmul precision for a comparison in `dtype`: "highest" (IEEE fp32) or XLA's default."""
    return "highest" if _ieee_fp32(dtype, tf32) else "default"


def run_torch_side(python: str | None, *args: str, env: dict | None = None) -> str:
    """`python ccq_jax/torch_reference ARGS...` in a child process; its stdout, or RuntimeError with its stderr."""
    cmd = [python or sys.executable, str(TORCH_SIDE), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"the PyTorch side failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
    return done.stdout


def torch_logits(checkpoint, input_ids, *, python: str | None = None, device: str = "cpu",
                 dtype: str = "float32", tf32: bool = False) -> tuple[np.ndarray, dict]:
    """(fp32 logits [B, T, vocab], what the torch side reports: device, torch and fla versions)."""
    with tempfile.TemporaryDirectory() as tmp:
        ids, out = Path(tmp) / "ids.npy", Path(tmp) / "logits.npy"
        np.save(ids, np.asarray(input_ids, np.int64))
        args = ["logits", "--checkpoint", str(checkpoint), "--ids", str(ids), "--out", str(out), "--device", device,
                "--dtype", dtype] + (["--tf32"] if tf32 else [])
        env = dict(os.environ)
        if _ieee_fp32(dtype, tf32):
            env["TRITON_F32_DEFAULT"] = "ieee"  # fla's fp32 tl.dot would otherwise round operands to TF32
        stdout = run_torch_side(python, *args, env=env)
        return np.load(out), json.loads(stdout.strip().splitlines()[-1])
