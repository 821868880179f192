"""bf16 inputs through the chunked path, against the float64 recurrence on the same (bf16-rounded) values.

Tolerances are fla's for half precision (tests/ops/test_gla.py, test_gdn.py): o and final
state 0.005; dq, dk, dv, dh0 0.008; dg and dbeta 0.02.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ccq_jax.ops as ops
from tests.builders import float64_ground_truth, make_inputs, op_gradients, rel_rms

OUT_TOL, GRAD_TOL, GATE_GRAD_TOL = 0.005, 0.008, 0.02


def _bf16(x):
    return jnp.asarray(x, jnp.bfloat16)


@pytest.mark.parametrize("name", ["gla", "gated_delta_rule", "ccq_gla", "ccq_gated_delta_rule"])
def test_bf16_chunk(name):
    x = make_inputs(20, "segments", t=70, k_norm=True)
    gate = "g" if "gla" in name else "g_head"
    names = ["q", "k", "v", gate] + (["beta"] if "delta" in name else []) + (["lam"] if name.startswith("ccq") else [])
    # tensors go in as bf16; gates, beta and lam stay fp32 as models keep them
    pos = [_bf16(x[n]) if n in "qkv" else x[n] for n in names]
    op = getattr(ops, name)
    kw = {"initial_state": x["initial_state"]}
    want = float64_ground_truth(op, [np.asarray(p, np.float32) for p in pos], kw, x)
    got = op_gradients(op, pos, kw, x, "chunk", None)
    labels = ["initial_state"] + names
    for label, g, w in zip(labels, jax.tree.leaves(got), jax.tree.leaves(want)):
        tol = GATE_GRAD_TOL if label in ("g", "g_head", "beta", "lam") else GRAD_TOL
        err = rel_rms(np.asarray(g, np.float32), w)
        assert err < tol, f"d{label}: relative RMS {err:.2e} (tolerance {tol})"

    o = op(*pos, initial_state=x["initial_state"], segment_ids=x["segment_ids"])[0]
    o_ref = op(*[np.asarray(p, np.float32) for p in pos], initial_state=x["initial_state"],
               segment_ids=x["segment_ids"], impl="recurrent")[0]
    assert o.dtype == jnp.bfloat16
    assert rel_rms(np.asarray(o, np.float32), o_ref) < OUT_TOL
