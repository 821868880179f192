"""The WY/UT kernels (`pallas_kernels.delta_wy`) against the XLA per-chunk algebra they replace
(`kernel_twins.wy`): w and u from T, T itself against float64 numpy, and the gradient against
`jax.vjp` of the XLA form.

Interpret mode on the CPU, packed documents (a document starts inside a chunk), strong decay,
chunks of 2 and 4 secondary 16-blocks (so the block recursion below the diagonal runs).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.tools import kernel_twins
from ccq_jax.ops.internals import chunk_cumsum, layout
from pallas_kernels.delta_wy import wy_apply, wy_gradient, wy_inverse
from tests.builders import rel_rms


def _inputs(chunk, dtype, dk=32, dv=64):
    """k (unit rows), v in `dtype`; G (the in-chunk cumsum of log decays, some strong) and beta fp32; layout."""
    rng = np.random.default_rng(chunk)
    b, t, h = 2, 2 * chunk, 2
    k = rng.standard_normal((b, t, h, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((b, t, h, dv))
    g = jnp.asarray(-np.exp(rng.standard_normal((b, t, h)) - 1.0), jnp.float32)
    beta = jnp.asarray(rng.uniform(0, 1, (b, t, h)), jnp.float32)
    docs = np.repeat(np.array([[0, 1, 2], [4, 4, 5]]), [chunk // 2 + 3, chunk, chunk // 2 - 3], axis=1)
    lay = layout(jnp.asarray(docs, jnp.int32), chunk)
    return jnp.asarray(k, dtype), jnp.asarray(v, dtype), chunk_cumsum(g, chunk), beta, lay, rng


@pytest.mark.parametrize("chunk,dtype,tol", [(32, jnp.float32, 1e-5), (64, jnp.float32, 1e-5),
                                             (64, jnp.bfloat16, 0.005)])
def test_matches_the_xla_form(chunk, dtype, tol):
    """w and u from T (`wy_apply` of `wy_inverse`), V in two 64-wide column tiles."""
    k, v, G, beta, lay, _ = _inputs(chunk, dtype, dv=128)
    inverse = wy_inverse(k, G, beta, lay.dd, chunk=chunk, interpret=True)
    w, u = wy_apply(inverse, k, v, G, beta, lay.reads, chunk=chunk, interpret=True)
    want_w, want_u = kernel_twins.wy(k, v, G, beta, lay, chunk)
    assert w.dtype == u.dtype == dtype
    assert rel_rms(w, want_w) < tol
    assert rel_rms(u, want_u) < tol


@pytest.mark.parametrize("chunk", [32, 64])
def test_inverse_matches_float64(chunk):
    """T = (I + A)^-1 per chunk from its definition (k, beta, G, documents), by a float64 solve."""
    k, v, G, beta, lay, _ = _inputs(chunk, jnp.float32)
    got = wy_inverse(k, G, beta, lay.dd, chunk=chunk, interpret=True)
    assert got.shape == G.shape + (chunk,) and got.dtype == jnp.float32
    b, t, h = G.shape
    heads_first = lambda x: np.moveaxis(np.asarray(x, np.float64).reshape(b, t // chunk, chunk, h, -1), 3, 2)
    kc, Gc, bc = heads_first(k), heads_first(G)[..., 0], heads_first(beta)[..., 0]  # [B, N, H, C, (K)]
    doc = np.asarray(lay.dd).reshape(b, -1, 1, chunk)
    i = np.arange(chunk)
    support = (i[:, None] > i[None, :]) & (doc[..., :, None] == doc[..., None, :])
    decay = np.exp(np.where(support, Gc[..., :, None] - Gc[..., None, :], -np.inf))
    A = bc[..., :, None] * np.einsum("bnhik,bnhjk->bnhij", kc, kc) * decay
    want = np.moveaxis(np.linalg.inv(np.eye(chunk) + A), 2, 3).reshape(got.shape)  # [B, Tp, H, C]
    err = rel_rms(got, want)
    print(f"T: relative RMS {err:.2e}")
    assert err < 1e-5
    above = np.tile(i[None, :] > i[:, None], (t // chunk, 1))[None, :, None, :]  # [1, Tp, 1, C]
    assert np.all(np.where(above, np.asarray(got), 0) == 0)


@pytest.mark.parametrize("chunk,dtype,tol,gate_tol", [(32, jnp.float32, 1e-5, 1e-5), (64, jnp.float32, 1e-5, 1e-5),
                                                      (64, jnp.bfloat16, 0.008, 0.02)])
def test_gradient_matches_the_vjp_of_the_xla_form(chunk, dtype, tol, gate_tol):
    """bf16: the reference sees the same rounded k, v, dw, du and runs in fp32 (fla's tolerances)."""
    k, v, G, beta, lay, rng = _inputs(chunk, dtype, dk=256, dv=128)  # K and V in several column tiles
    dw, du = (jnp.asarray(rng.standard_normal(x.shape), dtype) for x in (k, v))
    dk_rest = jnp.asarray(rng.standard_normal(k.shape), jnp.float32)  # the keys' other share, added on chip
    inverse = wy_inverse(k, G, beta, lay.dd, chunk=chunk, interpret=True)
    got = wy_gradient(k, v, G, beta, lay.reads, lay.dd, inverse, dw, du, dk_rest, chunk=chunk, interpret=True)
    up = lambda x: x.astype(jnp.float32)
    _, vjp = jax.vjp(lambda k, v, G, beta: kernel_twins.wy(k, v, G, beta, lay, chunk), up(k), up(v), G, beta)
    want = vjp((up(dw), up(du)))
    assert got[0].dtype == got[1].dtype == dtype
    for name, g, w, t in zip(["dk", "dv", "dbeta", "dG"], got, [want[0] + dk_rest, want[1], want[3], want[2]],
                             [tol, tol, gate_tol, gate_tol]):
        err = rel_rms(np.asarray(g, np.float32), w)
        print(f"{name}: relative RMS {err:.2e}")
        assert err < t, f"{name}: relative RMS {err:.2e} (tolerance {t})"
