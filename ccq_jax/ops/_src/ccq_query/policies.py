"""The CCQ read policies (`ReadPolicy`): q_clean from q, lambda and a way to apply Sigma_t to per-token vectors.

Every form of the read (recurrent, chunk, scan) builds its statistics once and hands `clean` a function
`apply(x) = Sigma_t x_t` on vectors laid out like q (K last); the policies only combine such products:

    first_order  q - lam Sigma q
    neumann      sum_{i=0..n} (-lam Sigma)^i q, built term by term (n = 1: first_order, the same floats)
    cg           conjugate gradient on A x = q, A = I + lam Sigma (symmetric, eigenvalues in [1, 1 + lam
                 eig_max]), started from x = q: one step is the first-order read with the step length that
                 minimises the A-norm error, K steps the exact (I + lam Sigma)^-1 q in exact arithmetic.

The kind "sigma" returns Sigma x itself (`ccq_jax.ops.covariance_apply`; not a read, lam unused).

Step lengths of CG are ratios r.r / p.Ap. Measured against q.q, a denominator below eps^2 (eps: the dtype's
machine epsilon) is a residual under q's own rounding, as at a document's first token when centred (Sigma = 0):
the step there is 0, and the ratios of the others stay far from underflow in their gradients.
"""

import jax.numpy as jnp

from ..xla.numerics import HIGHEST, ccq_correction


def _dot(a, b):
    return jnp.sum(a * b, axis=-1, keepdims=True)


def _ratio(num, den, scale):
    """num / den, 0 where den <= eps^2 scale (den >= 0 here), with both divided by `scale` (> 0) so that neither
    direction of autodiff underflows or divides by zero."""
    nonzero = den > jnp.finfo(den.dtype).eps ** 2 * scale
    return jnp.where(nonzero, (num / scale) / jnp.where(nonzero, den / scale, 1), 0)


def dense_apply(stats, centered):
    """`apply` of statistics held per token (`CCQStats` with cov [..., K, K]): x -> Sigma x, for the recurrence (one
    token's) and the associative scan (every token's)."""

    def apply(x):
        cov_x = jnp.einsum("...ij,...j->...i", stats.cov, x, precision=HIGHEST)
        return ccq_correction(cov_x, stats.key_sum, stats.count, x, centered)

    return apply


def clean(q, lam, apply, read):
    """q_clean for the policy `read` (a validated `ReadPolicy`); q [..., K] (fp32 or fp64), lam [...] (q's
    leading shape), apply(x) -> Sigma_t x_t for x shaped like q."""
    if read.kind == "sigma":
        return apply(q)
    lam = lam[..., None]
    if read.kind == "first_order":
        return q - lam * apply(q)
    if read.kind == "neumann":
        term, out = q, q
        for _ in range(read.terms):
            term = -(lam * apply(term))
            out = out + term
        return out
    qq = _dot(q, q)
    scale = jnp.where(qq > 0, qq, 1)
    x = q
    r = -(lam * apply(q))  # q - A q
    p, rr = r, _dot(r, r)
    for _ in range(read.iterations):
        ap = p + lam * apply(p)
        alpha = _ratio(rr, _dot(p, ap), scale)
        x, r = x + alpha * p, r - alpha * ap
        rr_next = _dot(r, r)
        p, rr = r + _ratio(rr_next, rr, scale) * p, rr_next
    return x
