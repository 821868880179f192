"""impl="pallas" compiled for the GPU (Triton, and Mosaic GPU for the gated delta rule's three state passes), at full
size, against the float64 recurrence run on the same GPU; the Mosaic GPU kernels also against their Triton twins and
against ptxas's report of spills and serialized tensor-core products.

Run on the GPU machine: `python3 -m pytest -m gpu tests/pallas`. Head dims are the
benchmark's (K = 256, V = 512); T = 1000 is not a multiple of the chunk (64); each row packs
several documents, one row with strong decay, the other with zeroed gates.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.ops.internals import head_logits
from pallas_kernels import delta_rule, linear_attention, mosaic_delta_states
from tests.builders import check_op, kernel_inputs as inputs, OUT_TOL, rel_rms, shard_map_check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (Triton and Mosaic GPU compile there)"),
]


@pytest.fixture(scope="module")
def x():
    return inputs(40, t=1000, h=2, dk=256, dv=512)


@pytest.mark.parametrize("name", ["gla", "gated_delta_rule", "ccq_query", "ccq_gla", "ccq_gated_delta_rule",
                                  "generalized_delta_rule", "ccq_generalized_delta_rule"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
def test_against_recurrence(x, name, dtype):
    check_op(name, x, 64, dtype)


@pytest.mark.parametrize("name,centered,normalize_keys", [
    ("ccq_query", False, True), ("ccq_query", True, False), ("ccq_gla", False, True),
    ("ccq_gated_delta_rule", True, False),
])
def test_ccq_options(x, name, centered, normalize_keys):
    check_op(name, x, 64, jnp.bfloat16, centered=centered, normalize_keys=normalize_keys)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["fp32", "bf16"])
def test_one_token_against_recurrence(dtype):
    """T = 1 (a decode step): the one-token kernels (`pallas_kernels.recurrent_step`), compiled, at the 1.3B heads."""
    one = inputs(43, t=1, h=4, dk=256, dv=512, segments=False)
    for name in ["gla", "gated_delta_rule", "ccq_query", "ccq_gla", "ccq_gated_delta_rule"]:
        check_op(name, one, 64, dtype)


@pytest.mark.parametrize("rows", [1, 2, 16, 64])
def test_lm_head_rows_against_float64(rows):
    """The row-matmul LM head (`pallas_kernels.row_matmul`), compiled, at gla-1.3b's head [2048, 32000] in bf16,
    against the float64 product (the product rounded to bf16, as XLA's: measured 1.7e-3 on a CPU)."""
    kx, kw = jax.random.split(jax.random.key(44))
    x = jax.random.normal(kx, (rows, 2048)).astype(jnp.bfloat16)
    w = (jax.random.normal(kw, (2048, 32000)) * 2048 ** -0.5).astype(jnp.bfloat16)
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    for impl in ("pallas", "xla"):
        assert rel_rms(np.asarray(head_logits(x, w, impl=impl), np.float64), exact) < 4e-3, impl


# the Mosaic GPU passes against their Triton twins: the benchmark's heads, 16 chunks of 64
_B, _T, _H, _DK, _DV, _C = 2, 1024, 6, 256, 512, 64


def _normal(key, shape, scale=1.0):
    return (scale * jax.random.normal(key, shape)).astype(jnp.bfloat16)


def _factors(key, shape):
    """Per-token or per-chunk factors in [0.3, 1)."""
    return jax.random.uniform(key, shape, minval=0.3, maxval=1.0)


def _chunk_decays(key):
    """[B, N, H] decays, zero every fifth chunk (a document starting)."""
    return _factors(key, (_B, _T // _C, _H)).at[:, ::5].set(0.0)


@pytest.mark.parametrize("corrected", [True, False], ids=["delta_states", "chunk_states"])
def test_mosaic_state_passes_match_their_triton_twins(corrected):
    """The Mosaic GPU state passes the op runs on a GPU against the Triton kernels they replace, on the benchmark's
    heads (K = 256, V = 512), an initial state and chunks whose decay is zero (a document starting)."""
    keys = jax.random.split(jax.random.key(5), 6)
    keys_shape, values_shape = (_B, _T, _H, _DK), (_B, _T, _H, _DV)
    w, u, k = _normal(keys[0], keys_shape, 0.06), _normal(keys[1], values_shape), _normal(keys[2], keys_shape, 0.06)
    write, decay = _factors(keys[3], (_B, _T, _H)), _chunk_decays(keys[4])
    h0 = jax.random.normal(keys[5], (_B, _H, _DK, _DV))
    got = mosaic_delta_states.state_pass(w if corrected else None, u, k, write, decay, h0, chunk=_C,
                                         store=jnp.bfloat16)
    if corrected:
        want = delta_rule.delta_states(w, u, k, write, decay, h0, chunk=_C, store=jnp.bfloat16, interpret=False)
    else:
        states, final = linear_attention.chunk_states(k, u, None, write, decay, h0, chunk=_C, gate=None,
                                                      store=jnp.bfloat16, interpret=False)
        want = (states, None, final)
    for name, g, r in zip(("states", "v_new", "final state"), got, want):
        assert (g is None) == (r is None), name
        if r is not None:
            assert rel_rms(g.astype(jnp.float32), r.astype(jnp.float32)) < OUT_TOL, name


def test_mosaic_state_gradient_pass_matches_its_triton_twin():
    """`delta_dstates` in Mosaic GPU (which the op runs on a GPU) against the Triton kernel, as above."""
    keys = jax.random.split(jax.random.key(6), 9)
    q, k, w = (_normal(key, (_B, _T, _H, _DK), 0.06) for key in keys[:3])
    do, dv_local = (_normal(key, (_B, _T, _H, _DV)) for key in keys[3:5])
    read, write = (_factors(key, (_B, _T, _H)) for key in keys[5:7])
    decay, dfinal = _chunk_decays(keys[7]), jax.random.normal(keys[8], (_B, _H, _DK, _DV))
    args = (q, k, w, do, dv_local, read, write, decay, dfinal)
    kw = dict(chunk=_C, scale=_DK ** -0.5, store=jnp.bfloat16)
    got = mosaic_delta_states.state_gradient_pass(*args, **kw)
    want = delta_rule.delta_dstates(*args, interpret=False, **kw)
    for name, g, r in zip(("state gradients", "dv_new", "initial state's gradient"), got, want):
        assert rel_rms(g.astype(jnp.float32), r.astype(jnp.float32)) < OUT_TOL, name


_COMPILE_MOSAIC_PASSES = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from pallas_kernels import mosaic_delta_states as m
    b, t, h, dk, dv, c = 1, 192, 1, 256, 128, 64
    bf, f32 = jnp.bfloat16, jnp.float32
    k, u = jnp.zeros((b, t, h, dk), bf), jnp.zeros((b, t, h, dv), bf)
    write, decay, h0 = jnp.zeros((b, t, h), f32), jnp.zeros((b, t // c, h), f32), jnp.zeros((b, h, dk, dv), f32)
    for w in (k, None):
        jax.block_until_ready(m.state_pass(w, u, k, write, decay, h0, chunk=c, store=bf))
    jax.block_until_ready(m.state_gradient_pass(k, k, k, u, u, write, write, decay, h0, chunk=c, scale=1.0, store=bf))
""")


def test_mosaic_passes_compile_without_spills(tmp_path):
    """ptxas's report on the three Mosaic GPU kernels (Mosaic GPU writes it with MOSAIC_GPU_DUMP_PTXAS and
    MOSAIC_GPU_DUMP_TO, read once per process, hence a process of its own): no register spills and no
    serialized wgmma. The state gradient's pass had both, and twice its time, until its operands were addressed
    through `opaque_zero` (docs/records/changelog-sessions-2026-11-12.md, 2026-12-01)."""
    env = dict(os.environ, MOSAIC_GPU_DUMP_PTXAS="1", MOSAIC_GPU_DUMP_TO=str(tmp_path))
    subprocess.run([sys.executable, "-c", _COMPILE_MOSAIC_PASSES], env=env, check=True, timeout=600,
                   cwd=Path(__file__).resolve().parents[2])
    reports = {path.name.rsplit("_", 1)[0]: path.read_text() for path in tmp_path.glob("*.ptxas")}
    assert sorted(reports) == ["chunk_states_mosaic", "delta_dstates_mosaic", "delta_states_mosaic"], sorted(reports)
    for kernel, report in reports.items():
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
        assert spills and spills.groups() == ("0", "0"), (kernel, report)
        assert "are serialized" not in report, (kernel, report)


def test_pallas_ops_inside_shard_map_match_the_unsharded_ops():
    """tests/ops/shard_map_check.py with impl="pallas" compiled on this machine's GPUs, with shard_map's default
    checks (tests/pallas/test_shard_map.py runs it interpreted on 4 CPU devices)."""
    assert shard_map_check(["pallas"]) < 1e-5