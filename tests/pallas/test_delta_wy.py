"""The fused WY/UT kernel (`pallas_kernels.delta_wy`) against the XLA per-chunk algebra it replaces in the forward.

Interpret mode on the CPU, packed documents (a document starts inside a chunk), strong decay,
chunks of 2 and 4 secondary 16-blocks (so the block recursion below the diagonal runs).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.ops import pallas as backend
from pallas_kernels.delta_wy import wy_representation
from tests.ops.conftest import rel_rms


@pytest.mark.parametrize("chunk,dtype,tol", [(32, jnp.float32, 1e-5), (64, jnp.float32, 1e-5),
                                             (64, jnp.bfloat16, 0.005)])
def test_matches_the_xla_form(chunk, dtype, tol):
    rng = np.random.default_rng(chunk)
    b, t, h, dk, dv = 2, 2 * chunk, 2, 32, 64
    k = rng.standard_normal((b, t, h, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((b, t, h, dv))
    g = -np.exp(rng.standard_normal((b, t, h)) - 1.0)  # log decays, some strong
    beta = rng.uniform(0, 1, (b, t, h))
    docs = np.repeat(np.array([[0, 1, 2], [4, 4, 5]]), [chunk // 2 + 3, chunk, chunk // 2 - 3], axis=1)
    k, v = jnp.asarray(k, dtype), jnp.asarray(v, dtype)
    g, beta = jnp.asarray(g, jnp.float32), jnp.asarray(beta, jnp.float32)
    lay = backend._layout(jnp.asarray(docs, jnp.int32), chunk)
    G = backend._chunk_cumsum(g, chunk)

    w, u = wy_representation(k, v, G, beta, lay.reads, lay.dd, chunk=chunk, interpret=True)
    want = backend._delta_local(k, k, v, g, beta, lay, chunk)
    assert w.dtype == u.dtype == dtype
    assert rel_rms(w, want.w) < tol
    assert rel_rms(u, want.u) < tol
