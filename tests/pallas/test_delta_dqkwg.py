"""`delta_rule.delta_dqkwg` (the gated delta rule's per-chunk gradients of q, k, w and the gates) against
`jax.vjp` of the XLA per-chunk algebra it replaces (`kernel_twins.chunk_algebra`) plus the products with the states.

Interpret mode on the CPU, packed documents (a document starts inside a chunk), mild and strong decay, K in
two tiles and V in two slabs (so the kernel's tile sums run), random states and state gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.tools import kernel_twins
from ccq_jax.ops.internals import chunk_cumsum, layout
from pallas_kernels import linear_attention_grad as la_grad
from pallas_kernels.delta_rule import delta_dqkwg
from tests.builders import rel_rms


def _case(chunk, dtype, dk=128, dv=128):
    rng = np.random.default_rng(chunk + dk)
    b, t, h = 2, 2 * chunk, 2
    n = t // chunk
    normal = lambda *shape: rng.standard_normal(shape)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    cast = lambda x: jnp.asarray(x, dtype)
    q, k = cast(unit(normal(b, t, h, dk))), cast(unit(normal(b, t, h, dk)))
    v_new, do, dv_new = cast(normal(b, t, h, dv)), cast(normal(b, t, h, dv)), cast(normal(b, t, h, dv))
    states, dstates = cast(normal(b, n, h, dk, dv)), cast(normal(b, n, h, dk, dv))
    # strong decay in the first sequence, mild in the second (whose first chunk keeps its state: no document starts
    # there), so that the state terms at the chunk's end stay visible
    g = jnp.asarray(-np.exp(normal(b, t, h) + np.array([-1.0, -4.0])[:, None, None]), jnp.float32)
    docs = np.repeat(np.array([[0, 1, 2], [4, 4, 5]]), [chunk // 2 + 3, chunk, chunk // 2 - 3], axis=1)
    lay = layout(jnp.asarray(docs, jnp.int32), chunk)
    return q, k, v_new, do, dv_new, states, dstates, chunk_cumsum(g, chunk), lay


@pytest.mark.parametrize("chunk,dtype,tol,gate_tol", [(32, jnp.float32, 1e-5, 1e-5), (64, jnp.float32, 1e-5, 1e-5),
                                                      (64, jnp.bfloat16, 0.008, 0.02)])
def test_matches_the_vjp_of_the_xla_form(chunk, dtype, tol, gate_tol):
    """bf16: the reference sees the same rounded inputs and runs in fp32 (fla's tolerances)."""
    q, k, v_new, do, dv_new, S, dS, G, lay = _case(chunk, dtype)
    scale = q.shape[-1] ** -0.5
    dscores = la_grad.chunk_dscores(do, v_new, lay.dd, chunk=chunk, scale=scale, interpret=True)
    got = delta_dqkwg(q, k, v_new, do, dv_new, G, dscores, lay.reads, lay.writes, lay.keep, S, dS, chunk=chunk,
                      scale=scale, interpret=True)
    up = lambda x: x.astype(jnp.float32)
    b, tp, h, _ = q.shape
    with_states = lambda x, s: jnp.einsum("bnchv,bnhkv->bnchk", up(x).reshape(b, -1, chunk, h, x.shape[-1]), up(s),
                                          precision="highest").reshape(b, tp, h, -1)
    _, vjp = jax.vjp(lambda q, k, G: kernel_twins.chunk_algebra(q, k, G, lay, chunk), up(q), up(k), G)
    want_dq, want_dk, want_dG = vjp(kernel_twins.ChunkAlgebra(
        q_read=scale * with_states(do, S), scores=dscores, k_end=with_states(v_new, dS),
        decay=jnp.sum(up(S) * up(dS), axis=(-2, -1))))
    want_dw = -with_states(dv_new, S)
    assert [x.dtype for x in got] == [dtype, jnp.float32, dtype, jnp.float32]
    errors = [rel_rms(a, b) for a, b in zip(got, (want_dq, want_dk, want_dw, want_dG))]
    print("dq, dk, dw, dG relative RMS:", ", ".join(f"{e:.2e}" for e in errors))
    assert max(errors[:3]) < tol
    assert errors[3] < gate_tol
