"""The UT-transform inverse kernel (interpret mode) against NumPy, and its VJP against autodiff of a solve.

Chunks of 16 to 128 rows (1 to 8 diagonal blocks, so every block-merge path runs), entries as
large as the gated delta rule produces (|A_ij| <= 1: beta <= 1, unit keys, decays <= 1).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccq_jax.ops.pallas import _unit_lower_inverse
from tests.ops.conftest import rel_rms


def _strictly_lower(rng, c, batch=(2, 1, 3)):
    return np.tril(rng.uniform(-1, 1, batch + (c, c)), -1).astype(np.float32)


@pytest.mark.parametrize("c", [16, 64, 128])
def test_inverse_matches_numpy(c):
    a = _strictly_lower(np.random.default_rng(c), c)
    want = np.linalg.inv(np.eye(c) + a.astype(np.float64))
    got = np.asarray(_unit_lower_inverse(jnp.asarray(a)))
    assert np.array_equal(got, np.tril(got)) and np.all(np.diagonal(got, axis1=-2, axis2=-1) == 1)
    assert rel_rms(got, want) < 1e-5


def test_vjp_matches_autodiff_of_a_triangular_solve():
    rng = np.random.default_rng(5)
    a, ct = jnp.asarray(_strictly_lower(rng, 64)), jnp.asarray(rng.standard_normal((2, 1, 3, 64, 64)), jnp.float32)
    eye = jnp.eye(64, dtype=jnp.float32)

    def solve(a):
        a = jnp.tril(a, -1)  # the entries the kernel reads
        return jax.lax.linalg.triangular_solve(a + eye, jnp.broadcast_to(eye, a.shape), left_side=True, lower=True,
                                               unit_diagonal=True)

    loss = lambda f: lambda a: jnp.sum(f(a) * ct)
    with jax.default_matmul_precision("highest"):
        want = jax.grad(loss(solve))(a)
    got = jax.grad(loss(_unit_lower_inverse))(a)
    assert rel_rms(np.asarray(got), np.asarray(want)) < 1e-5
