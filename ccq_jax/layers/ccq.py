"""CCQ on a linear-attention layer: `CCQConfig` and the gate that produces lambda per token and head.

Gate modes (`CCQConfig.mode`):
    "learned"  lam_t = lambda_max * sigmoid(q_t . weight_h + bias_h)  per head (`weight [H, K]`, `bias [H]`)
    "fixed"    lam_t = fixed_lambda                                   (the paper's fixed-lambda ablation)
    "off"      no CCQ read at all: the layer runs its plain backbone and keeps no statistics
The parameters exist in every mode, so a trained model switches modes without changing its
parameters (`ccq_jax.models.with_config(model, **{"ccq.mode": "off"})`, the paper's
"CCQ off at inference" ablation). `weight` starts at zero and `bias` at `gate_bias_init`
(default logit(0.1), so a fresh learned gate starts where the fixed ablation sits at lambda_max = 1).

Read policies (`CCQConfig.read`, `ccq_jax.ops.ReadPolicy`): "first_order" (the paper's q - lam Sigma q),
"neumann" (`terms` powers of -lam Sigma), "cg" (`iterations` conjugate-gradient steps on (I + lam Sigma) x = q).
`lambda_max` above 1 widens the gate's range, for "cg" only: there I + lam Sigma stays positive definite,
while the first-order read and the Neumann series stop contracting once lam eig_max(Sigma) > 1. The
kernels compute the first-order read; the other policies run on the XLA forms (`kernel.impl` chunk,
`kernel.decode_impl` recurrent: `ccq_jax.layers.KernelPolicy`).
"""

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax import configlib
from ccq_jax import checks as check
from ccq_jax.layers.params import param
from ccq_jax.layers.remat import maybe_recomputed
from ccq_jax.ops import ReadPolicy


@dataclasses.dataclass(frozen=True, kw_only=True)
class CCQConfig:
    """mode: learned | fixed | off; centered / normalize_keys: the covariance conventions of `ops.ccq_query`;
    read, terms, iterations: the read policy; lambda_max: the learned gate's range [0, lambda_max]."""

    mode: Literal["learned", "fixed", "off"] = "learned"
    fixed_lambda: float = 0.1
    centered: bool = True
    normalize_keys: bool = True
    gate_bias_init: float = math.log(0.1 / 0.9)
    read: Literal["first_order", "neumann", "cg"] = "first_order"
    terms: int = 1
    iterations: int = 1
    lambda_max: float = 1.0

    def __post_init__(self):
        configlib.check_field_types(self, "ccq.")
        check.real("ccq.lambda_max", self.lambda_max, lo=0.0, lo_open=True)
        if self.lambda_max > 1 and self.read != "cg":
            raise ValueError(f"ccq.lambda_max: above 1 only with ccq.read='cg' (the {self.read!r} read stops "
                             f"contracting once lambda * eig_max(Sigma) > 1), got {self.lambda_max}")
        check.real("ccq.fixed_lambda", self.fixed_lambda, lo=0.0, hi=self.lambda_max)
        check.real("ccq.gate_bias_init", self.gate_bias_init)
        check.integer("ccq.terms", self.terms, minimum=1)
        check.integer("ccq.iterations", self.iterations, minimum=1)

    @property
    def policy(self) -> ReadPolicy:
        """The read policy the ops take (`ccq_jax.ops.ReadPolicy`)."""
        return ReadPolicy(self.read, terms=self.terms, iterations=self.iterations)

    @property
    def active(self) -> bool:
        return self.mode != "off"


class CCQGate(nnx.Module):
    """lambda [B, T, H] (fp32, in [0, lambda_max]) from the queries [B, T, H, K] the backbone reads with."""

    def __init__(self, num_heads: int, head_dim: int, cfg: CCQConfig, *, param_dtype=jnp.float32,
                 recompute: bool = True):
        self.cfg = cfg
        self.recompute = recompute  # see ccq_jax.layers.remat
        self.weight = param(jax.nn.initializers.zeros, None, (num_heads, head_dim), ("heads", "kv"), param_dtype)
        self.bias = param(jax.nn.initializers.constant(cfg.gate_bias_init), None, (num_heads,), ("heads",),
                          param_dtype)

    def __call__(self, q: jax.Array) -> jax.Array:
        if self.cfg.mode == "fixed":
            return jnp.full(q.shape[:3], self.cfg.fixed_lambda, jnp.float32)
        if self.cfg.mode != "learned":
            raise ValueError(f"ccq.mode: the gate is not used in mode {self.cfg.mode!r}")
        return self.cfg.lambda_max * maybe_recomputed(_learned_gate, self.recompute)(q, self.weight[...],
                                                                                     self.bias[...])


@jax.checkpoint
def _learned_gate(q, weight, bias):
    """sigmoid(q . weight_h + bias_h) in fp32; recomputed in the backward pass from q (autodiff would keep an fp32
    copy of q)."""
    logits = jnp.einsum("bthk,hk->bth", q.astype(jnp.float32), weight.astype(jnp.float32))
    return jax.nn.sigmoid(logits + bias.astype(jnp.float32))
