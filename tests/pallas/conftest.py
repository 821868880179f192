"""Inputs and checks shared by the Pallas tests: tiny shapes in interpret mode on CPU, full size on a GPU.

Every check runs an op with impl="pallas" and compares its outputs, final states and the
gradients of every input with the token-by-token recurrence run in float64 (relative RMS).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import ccq_jax.ops as ops
from tests.ops.conftest import log_decay, rel_rms
from tests.ops.test_gradients import float64_ground_truth, op_gradients, flags

FP32_TOL = 1e-4  # fla's chunk numerics (decays as differences of in-chunk cumsums): measured <= 2e-5
OUT_TOL, GRAD_TOL, GATE_GRAD_TOL = 0.005, 0.008, 0.02  # fla's half-precision tolerances

OPS = {
    "gla": ["q", "k", "v", "g"],
    "gated_delta_rule": ["q", "k", "v", "g_head", "beta"],
    "ccq_query": ["q", "k", "lam"],
    "ccq_gla": ["q", "k", "v", "g", "lam"],
    "ccq_gated_delta_rule": ["q", "k", "v", "g_head", "beta", "lam"],
}
GATES = ("g", "g_head", "beta", "lam")


def inputs(seed, t, h=2, dk=12, dv=20):
    """fp32 inputs for every op, two rows of packed documents: row 0 with strong decay (exp(-7) per token
    on average), row 1 with half its gates exactly zero (fla's recipes, tests/ops/conftest.py).

    Keys have unit norm (the gated delta rule needs ||k|| <= 1 to stay stable over long T).
    """
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, np.float32)
    cuts = [t // 7, t // 3 + 1, (9 * t) // 10 - t // 7 - t // 3 - 1]
    lengths = [cuts + [t - sum(cuts)], [t - 5, 5]]  # an id that comes back after another starts a new document
    segments = np.stack([np.repeat([0, 1, 2, 1], lengths[0]), np.repeat([7, 3], lengths[1])]).astype(np.int32)
    gates = lambda *shape: np.stack([log_decay(rng, shape, "strong_decay"), log_decay(rng, shape, "zeroed_gates")])
    k = rng.standard_normal((2, t, h, dk))
    init_k = rng.standard_normal((2, h, 5, dk))
    init_k /= np.linalg.norm(init_k, axis=-1, keepdims=True)
    return dict(
        q=f32(rng.standard_normal((2, t, h, dk))),
        k=f32(k / np.linalg.norm(k, axis=-1, keepdims=True)),
        v=f32(rng.standard_normal((2, t, h, dv))),
        g=f32(gates(t, h, dk)),
        g_head=f32(gates(t, h)),
        beta=f32(rng.uniform(0, 1, (2, t, h))),
        lam=f32(rng.uniform(0, 1, (2, t, h))),
        initial_state=f32(rng.standard_normal((2, h, dk, dv))),
        initial_stats=ops.CCQStats(f32(np.einsum("bhnk,bhnl->bhkl", init_k, init_k)), f32(init_k.sum(2)),
                                   f32(np.full((2, h), 5.0))),
        segment_ids=segments,
    )


def _arguments(name, x, dtype):
    """Positional and keyword inputs of op `name`; q, k, v in `dtype`, gates, beta, lam and states fp32."""
    pos = [jnp.asarray(x[n], dtype) if n in "qkv" else x[n] for n in OPS[name]]
    kw = {}
    if name != "ccq_query":
        kw["initial_state"] = x["initial_state"]
    if name.startswith("ccq"):
        kw["initial_stats"] = x["initial_stats"]
    return pos, kw


def check_op(name, x, chunk, dtype=jnp.float32, **options):
    """Outputs, final states and all gradients of impl="pallas" against the float64 recurrence.

    fp32: every relative RMS < FP32_TOL. bf16 (q, k, v rounded; the reference sees the same
    rounded values): fla's tolerances. options: the op's keyword options (centered=False, ...).
    """
    op = functools.partial(getattr(ops, name), **options)
    pos, kw = _arguments(name, x, dtype)
    ref_pos = [np.asarray(p, np.float32) for p in pos]
    call = dict(**flags(op), segment_ids=x["segment_ids"])
    got = op(*pos, **kw, **call, impl="pallas", chunk_size=chunk)
    with jax.enable_x64(True):
        to64 = lambda a: jnp.asarray(a, jnp.float64)
        want = jax.tree.map(np.asarray, op(*map(to64, ref_pos), **jax.tree.map(to64, kw), **call, impl="recurrent"))
    fp32 = dtype == jnp.float32
    assert jax.tree.leaves(got)[0].dtype == dtype
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        err = rel_rms(np.asarray(g, np.float32), w)
        assert err < (FP32_TOL if fp32 else OUT_TOL), f"{name} {jax.tree_util.keystr(path)}: relative RMS {err:.2e}"

    want = float64_ground_truth(op, ref_pos, kw, x)
    got = op_gradients(op, pos, kw, x, "pallas", chunk)
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        label = OPS[name][path[1].idx] if path[0].key == "pos" else jax.tree_util.keystr(path[1:])
        assert np.all(np.isfinite(np.asarray(g, np.float32))), f"{name} d{label}: not finite"
        tol = FP32_TOL if fp32 else (GATE_GRAD_TOL if label in GATES else GRAD_TOL)
        err = rel_rms(np.asarray(g, np.float32), w)
        assert err < tol, f"{name} d{label}: relative RMS {err:.2e} (tolerance {tol})"
