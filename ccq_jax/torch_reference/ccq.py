"""The CCQ read in plain PyTorch: the gate that gives lambda and the token-by-token covariance recurrence.

Written from the formulas of `docs/design.md` (section 3), independently of the JAX code:

    k^_t = k_t / sqrt(||k_t||^2 + 1e-6)                      (when normalize_keys)
    C_t = sum_{j<=t} k^_j k^_j^T,  m_t = sum_{j<=t} k^_j,  n_t = t
    Sigma_t q = C_t q / n_t - (m_t / n_t) ((m_t / n_t) . q)   (second term only when centered)
    q_clean_t = q_t - lam_t Sigma_t q_t

The gate (`CCQGate`, parameters `weight [H, K]` and `bias [H]`, the names under which
`ccq_jax.convert.save_fla_checkpoint` writes them) gives lam_t = sigmoid(q_t . weight_h + bias_h)
in mode "learned" (times `lambda_max`, the gate's range [0, lambda_max]) and the constant `fixed_lambda` in mode
"fixed"; mode "off" skips the read. Of ccq-jax's read policies (`read`, `terms`, `iterations`) only the first-order
read above is implemented here: `read` "neumann" or "cg" is refused by name (`terms` and `iterations` are theirs
and do not change the first-order read).
"""

import torch
from torch import nn

L2_NORM_EPS = 1e-6
CCQ_FIELDS = ("mode", "fixed_lambda", "centered", "normalize_keys", "gate_bias_init")
# ccq-jax's later fields and their defaults (checkpoints written before them lack them)
CCQ_DEFAULTS = {"read": "first_order", "terms": 1, "iterations": 1, "lambda_max": 1.0}
MODES = ("learned", "fixed", "off")
READS = ("first_order",)


def check_ccq_config(ccq) -> dict:
    """The CCQ settings of a checkpoint's config.json as a dict; ValueError naming what is missing or unknown."""
    if not isinstance(ccq, dict):
        raise ValueError(f"ccq: expected a dict with keys {CCQ_FIELDS}, got {ccq!r}")
    missing, unknown = set(CCQ_FIELDS) - set(ccq), set(ccq) - set(CCQ_FIELDS) - set(CCQ_DEFAULTS)
    if missing or unknown:
        raise ValueError(f"ccq: expected the keys {CCQ_FIELDS} (and optionally {tuple(CCQ_DEFAULTS)}); missing "
                         f"{sorted(missing)}, unknown {sorted(unknown)}")
    ccq = {**CCQ_DEFAULTS, **ccq}
    if ccq["mode"] not in MODES:
        raise ValueError(f"ccq.mode: expected one of {MODES}, got {ccq['mode']!r}")
    if ccq["read"] not in READS:
        raise ValueError(f"ccq.read: the PyTorch reference implements {READS}, got {ccq['read']!r}")
    if not ccq["lambda_max"] > 0:
        raise ValueError(f"ccq.lambda_max: expected a positive number, got {ccq['lambda_max']!r}")
    return ccq


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(||x||^2 + 1e-6) over the last axis, in fp32 (fla's l2norm)."""
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_NORM_EPS)


def ccq_query(q, k, lam, *, centered: bool = True, normalize_keys: bool = True) -> torch.Tensor:
    """q, k [B, T, H, K], lam [B, T, H] -> q_clean [B, T, H, K] in q's dtype (fp32 inside)."""
    kh = l2norm(k) if normalize_keys else k.float()
    qf, lam = q.float(), lam.float()
    b, t, h, d = q.shape
    cov = q.new_zeros(b, h, d, d, dtype=torch.float32)
    key_sum = q.new_zeros(b, h, d, dtype=torch.float32)
    out = torch.empty_like(qf)
    for i in range(t):
        k_i, q_i = kh[:, i], qf[:, i]
        cov = cov + k_i[..., :, None] * k_i[..., None, :]
        key_sum = key_sum + k_i
        n = float(i + 1)
        sigma_q = torch.einsum("bhij,bhj->bhi", cov, q_i) / n
        if centered:
            mean = key_sum / n
            sigma_q = sigma_q - mean * (mean * q_i).sum(-1, keepdim=True)
        out[:, i] = q_i - lam[:, i, :, None] * sigma_q
    return out.to(q.dtype)


class CCQGate(nn.Module):
    """lambda [B, T, H] (fp32) from the queries [B, T, H, K] the backbone reads with."""

    def __init__(self, num_heads: int, head_dim: int, ccq: dict):
        super().__init__()
        self.cfg = check_ccq_config(ccq)
        self.weight = nn.Parameter(torch.empty(num_heads, head_dim))
        self.bias = nn.Parameter(torch.empty(num_heads))
        self.reset_parameters()

    def reset_parameters(self):
        """The JAX gate's initialisation: zero weight, bias = gate_bias_init."""
        with torch.no_grad():
            self.weight.zero_()
            self.bias.fill_(self.cfg["gate_bias_init"])

    @property
    def active(self) -> bool:
        return self.cfg["mode"] != "off"

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        if self.cfg["mode"] == "fixed":
            return q.new_full(q.shape[:3], self.cfg["fixed_lambda"], dtype=torch.float32)
        logits = torch.einsum("bthk,hk->bth", q.float(), self.weight.float())
        return self.cfg["lambda_max"] * torch.sigmoid(logits + self.bias.float())

    def clean(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q_clean = (I - lam Sigma) q for q, k [B, T, H, K] (q unchanged in mode "off")."""
        if not self.active:
            return q
        return ccq_query(q, k, self(q), centered=self.cfg["centered"], normalize_keys=self.cfg["normalize_keys"])
