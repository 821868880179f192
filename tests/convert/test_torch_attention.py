"""flash-attn's `flash_attn_func` on PyTorch (`ccq_jax.torch_reference.attention`, fla's hybrid attention where
flash-attn is not installed) against a float64 loop over flash-attn's rule: query i of the last Tq of Tk positions
reads keys i + Tk - Tq - window .. i + Tk - Tq, grouped-query heads shared. Runs in a Python with torch and fla
(CCQ_TORCH_PYTHON, as tests/convert/test_live.py; skipped where there is none)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import TORCH_PYTHON

pytestmark = pytest.mark.skipif(TORCH_PYTHON is None, reason="set CCQ_TORCH_PYTHON to a Python with torch and fla")

CHILD = r"""
import json, sys, types
from pathlib import Path
package = types.ModuleType("ccq_jax")  # the bare namespace: no JAX in this Python
package.__path__ = [str(Path(sys.argv[1]) / "ccq_jax")]
sys.modules["ccq_jax"] = package
import numpy as np
import torch
from torch.nn.attention import SDPBackend
from fla.layers import attn as fla_attn_layer
from ccq_jax.torch_reference.attention import FUSED_BACKENDS, fla_attention, flash_attn_func, flash_attn_on_torch
from ccq_jax.torch_reference.cpu import cpu_paths  # fla's rotary embedding is Triton: its reference on a CPU

def reference(q, k, v, window, scale):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, tq, h, d = q.shape
    tk, groups = k.shape[1], h // k.shape[2]
    out = np.zeros_like(q)
    for i in range(tq):
        last = i + tk - tq
        first = 0 if window < 0 else max(0, last - window)
        for head in range(h):
            scores = np.einsum("bd,bjd->bj", q[:, i, head], k[:, first:last + 1, head // groups]) * scale
            p = np.exp(scores - scores.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            out[:, i, head] = np.einsum("bj,bjd->bd", p, v[:, first:last + 1, head // groups])
    return out

rows = []
g = torch.Generator().manual_seed(0)
for tq, tk, h, hkv, window, dtype in [(12, 12, 4, 2, -1, "float32"), (12, 12, 4, 4, 3, "float32"),
                                      (1, 9, 4, 1, -1, "float32"), (1, 9, 2, 2, 4, "float32"),
                                      (3, 9, 4, 2, -1, "float32"), (3, 9, 4, 2, 2, "float32"),
                                      (16, 16, 4, 2, -1, "bfloat16")]:
    q = torch.randn(2, tq, h, 8, generator=g).to(getattr(torch, dtype))
    k, v = (torch.randn(2, tk, hkv, 8, generator=g).to(getattr(torch, dtype)) for _ in range(2))
    out = flash_attn_func(q, k, v, causal=True, window_size=(window, 0))
    want = reference(q.float(), k.float(), v.float(), window, 8 ** -0.5)
    err = float(np.abs(out.float().numpy() - want).max() / np.abs(want).max())
    rows.append({"case": [tq, tk, h, hkv, window, dtype], "dtype": str(out.dtype).removeprefix("torch."),
                 "shape": list(out.shape), "err": err})
scaled = flash_attn_func(q.float(), k.float(), v.float(), causal=True, softmax_scale=0.5)
want = reference(q.float(), k.float(), v.float(), -1, 0.5)
rows.append({"case": "scale", "err": float(np.abs(scaled.numpy() - want).max())})
errors = {}
for name, call in [("causal", lambda: flash_attn_func(q, k, v)),
                   ("dropout", lambda: flash_attn_func(q, k, v, dropout_p=0.1, causal=True)),
                   ("longer_q", lambda: flash_attn_func(torch.randn(1, 5, 2, 8), torch.randn(1, 4, 2, 8),
                                                        torch.randn(1, 4, 2, 8), causal=True)),
                   ("heads", lambda: flash_attn_func(torch.randn(1, 4, 3, 8), torch.randn(1, 4, 2, 8),
                                                     torch.randn(1, 4, 2, 8), causal=True))]:
    try:
        call()
        errors[name] = None
    except Exception as e:
        errors[name] = f"{type(e).__name__}: {e}"
original = fla_attn_layer.flash_attn_func
with cpu_paths(), flash_attn_on_torch([SDPBackend.MATH]):
    layer = fla_attn_layer.Attention(hidden_size=32, num_heads=4, num_kv_heads=2, layer_idx=0)
    patched = fla_attn_layer.flash_attn_func is flash_attn_func
    x = torch.randn(2, 10, 32, generator=g)
    y = layer(x)[0]
fused = {}
for name, backends in [("fused", FUSED_BACKENDS), ("cudnn_only", [SDPBackend.CUDNN_ATTENTION])]:
    with flash_attn_on_torch(backends):
        try:
            out = flash_attn_func(q.float(), k.float(), v.float(), causal=True, window_size=(2, 0))
            fused[name] = float(np.abs(out.numpy() - reference(q.float(), k.float(), v.float(), 2, 8 ** -0.5)).max())
        except RuntimeError as e:
            fused[name] = str(e).splitlines()[0]
restored = fla_attn_layer.flash_attn_func is original
how = {}
for name, config in [("plain", {"attn": None}), ("hybrid", {"attn": {"layers": [1], "num_heads": 4}})]:
    label, context = fla_attention(config)
    with context:
        how[name] = [label, fla_attn_layer.flash_attn_func is flash_attn_func]
print(json.dumps({"rows": rows, "errors": errors, "patched": patched, "restored": restored,
                  "layer_out": list(y.shape), "finite": bool(torch.isfinite(y).all()), "fused": fused,
                  "how": how}))
"""


@pytest.fixture(scope="module")
def child():
    done = subprocess.run([TORCH_PYTHON, "-c", CHILD, str(Path(__file__).resolve().parents[2])], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_alignment_window_and_head_grouping_equals_the_float64_rule(child):
    for row in child["rows"][:-2]:  # fp32: full causal, windows, one-token decode, a block of queries on a cache
        assert row["err"] < 1e-6, row
        assert row["dtype"] == "float32" and row["shape"][1] == row["case"][0], row
    bf16 = child["rows"][-2]
    assert bf16["dtype"] == "bfloat16" and bf16["err"] < 2e-2, bf16
    assert child["rows"][-1]["err"] < 1e-5  # softmax_scale given


def test_what_flash_attn_would_not_do_is_refused_by_name(child):
    errors = child["errors"]
    assert errors["causal"].startswith("NotImplementedError") and "causal=False" in errors["causal"]
    assert "dropout_p" in errors["dropout"]
    assert errors["longer_q"] == "ValueError: q: expected at most as many positions as k (4), got 5"
    assert errors["heads"] == "ValueError: k: expected a number of heads dividing q's 3, got 2"


def test_fla_attention_runs_inside_the_block_and_a_backend_that_cannot_run_is_an_error(child):
    assert child["patched"] and child["restored"]
    assert child["layer_out"] == [2, 10, 32] and child["finite"]
    assert child["fused"]["fused"] < 1e-5  # PyTorch's CPU flash kernel takes the windowed call
    assert isinstance(child["fused"]["cudnn_only"], str)  # no cuDNN on a CPU: an error, not the math fallback


def test_fla_attention_says_how_a_config_s_attention_runs(child):
    assert child["how"]["plain"] == ["none", False]
    assert child["how"]["hybrid"] == ["torch sdpa, fused backends", True]  # no flash-attn in a CPU Python


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
