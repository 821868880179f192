"""The named members of the generalized delta rule's family, as thin validated front doors: each checks its own
gates, builds the erase vector a and the written value, and runs `generalized_delta_rule` (`*_inputs` build them,
so that the CCQ versions in `ccq_generalized_delta_rule` build the same)."""

import jax.numpy as jnp

from ..xla import validate
from ..xla.numerics import l2_normalize
from .api import generalized_delta_rule


def kda_inputs(q, k, v, g, beta, use_qk_l2norm_in_kernel=False):
    """(q, k, beta v, g, beta k): KDA's arguments of the generalized delta rule (products in the inputs' dtypes)."""
    q, k, v, (b, t, h, _, _) = validate.qkv(q, k, v)
    beta = validate.per_token("beta", beta, (b, t, h), "BTH", lo=0, hi=2, meaning="delta-rule step size")
    if use_qk_l2norm_in_kernel:
        q, k = l2_normalize(q), l2_normalize(k)
    step = beta[..., None]
    return q, k, (step * v).astype(v.dtype), g, (step * k).astype(k.dtype)


def gated_delta_rule_2_inputs(q, k, v, g, b, w):
    """(q, k, w * v, g, b * k): GDN-2's arguments of the generalized delta rule."""
    q, k, v, (bs, t, h, dk, dv) = validate.qkv(q, k, v)
    b = validate.per_token("b", b, (bs, t, h, dk), "BTHK", lo=0, hi=1, meaning="erase gate on the key axis")
    w = validate.per_token("w", w, (bs, t, h, dv), "BTHV", lo=0, hi=1, meaning="write gate on the value axis")
    return q, k, (w * v).astype(v.dtype), g, (b * k).astype(k.dtype)


def qed_inputs(q, k, v, g, b, w, lam, project=True, gate_query=True):
    """(q, k, w * v, g, b * k + lam P (b * q)): QED's arguments of the generalized delta rule, P = I - k k^T when
    `project` (else I), b * q when `gate_query` (else q)."""
    q, k, v, g, erase = gated_delta_rule_2_inputs(q, k, v, g, b, w)
    lam = validate.per_token("lam", lam, q.shape[:3], "BTH", lo=0, hi=1, meaning="QED's query-erase weight")
    direction = b * q if gate_query else q
    if project:
        direction = direction - k * jnp.sum(k * direction, axis=-1, keepdims=True)
    return q, k, v, g, (erase + lam[..., None] * direction).astype(jnp.result_type(q, k))


def kda(q, k, v, g, beta, *, use_qk_l2norm_in_kernel=False, **options):
    """Kimi Delta Attention (fla's `chunk_kda` conventions): the gated delta rule with a per-channel decay,
    S_t = (I - beta_t k_t k_t^T) Diag(exp g_t) S_{t-1} + beta_t k_t v_t^T, o_t = scale S_t^T q_t.

    q, k, g: [B, T, H, K] (g the log decay <= 0 per key channel); v: [B, T, H, V]; beta: [B, T, H] in [0, 2].
    use_qk_l2norm_in_kernel: l2-normalise q and k first (fla's flag; `ccq_jax.ops.l2_normalize`).
    options: `generalized_delta_rule`'s keywords (scale, initial_state, output_final_state, segment_ids, impl,
    chunk_size, config, interpret, axes, context_axis). Returns (o [B, T, H, V] in v's dtype, final_state
    [B, H, K, V] fp32 or None).
    """
    return generalized_delta_rule(*kda_inputs(q, k, v, g, beta, use_qk_l2norm_in_kernel), **options)


def gated_delta_rule_2(q, k, v, g, b, w, **options):
    """Gated DeltaNet-2 (fla's `naive_recurrent_gdn2`, the reference of record): a channel-wise erase gate on the
    key axis and write gate on the value axis,
    S_t = (I - k_t (b_t * k_t)^T) Diag(exp g_t) S_{t-1} + k_t (w_t * v_t)^T, o_t = scale S_t^T q_t.

    q, k, g: [B, T, H, K] (g the log decay <= 0 per key channel); b: [B, T, H, K] in [0, 1]; v, w: [B, T, H, V],
    w in [0, 1]. b = w = beta (broadcast) is KDA. options and returns: as `kda`'s.
    """
    return generalized_delta_rule(*gated_delta_rule_2_inputs(q, k, v, g, b, w), **options)


def qed(q, k, v, g, b, w, lam, *, project=True, gate_query=True, **options):
    """QED, "the query knows what to forget" (arXiv 2608.13668): GDN-2 whose erase vector also points along the
    query, a_t = b_t * k_t + lam_t (I - k_t k_t^T)(b_t * q_t).

    Our reading (no code is public; each choice a switch): the state is read for erasure at a_t instead of b_t * k_t,
    so what the coming queries will look for is cleared too; (I - k k^T) keeps the query term from changing the
    erase along k itself (a projector when ||k|| = 1, keys l2-normalised as GDN-2's layers do; `project=False`
    uses the query direction as it is); the query direction is gated by the same erase gate b (`gate_query=False`:
    the raw q). lam_t [B, T, H] in [0, 1] mixes it in (the paper keeps lam small, <= 0.25); lam = 0 is GDN-2. The
    erase uses the raw query, the read (`scale S_t^T q_t`) the same query; the write is GDN-2's.

    Shapes as `gated_delta_rule_2`'s; options and returns: as `kda`'s.
    """
    return generalized_delta_rule(*qed_inputs(q, k, v, g, b, w, lam, project, gate_query), **options)
