"""The optimizer: AdamW with a warmup + cosine / WSD / constant schedule, global-norm clipping,
and weight decay masked off norms, biases, the gate parameters A_log and dt_bias, and CCQ gate biases.
"""

import dataclasses
import math
import re
from typing import Literal

import jax
import optax

from ccq_jax import configlib

# Parameter paths (joined with '/') that never get weight decay.
NO_DECAY = re.compile(r"(norm|bias|A_log|dt_bias|lam_bias)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    decay_fraction: float = 0.2  # WSD: the last fraction of steps decays linearly to min_lr
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # global norm; 0 disables

    def __post_init__(self):
        configlib.check_field_types(self, "optim.")
        if not 0 < self.lr < math.inf:
            raise ValueError(f"optim.lr: expected a finite value > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio: expected in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps: expected >= 0, got {self.warmup_steps}")
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"optim.decay_fraction: expected in (0, 1], got {self.decay_fraction}")
        for name in ("weight_decay", "grad_clip"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"optim.{name}: expected a finite value >= 0, got {getattr(self, name)}")
        if not 0 < self.eps < math.inf:  # eps = 0 divides 0 by 0 where a gradient stays zero
            raise ValueError(f"optim.eps: expected a finite value > 0, got {self.eps}")
        if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
            raise ValueError(f"optim.b1/b2: expected in [0, 1), got {self.b1}, {self.b2}")


def learning_rate(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Linear warmup to cfg.lr, then cosine or WSD decay to lr * min_lr_ratio at total_steps."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
    end = cfg.lr * cfg.min_lr_ratio
    rest = max(total_steps - warmup, 1)
    if cfg.schedule == "cosine":
        after = optax.cosine_decay_schedule(cfg.lr, rest, alpha=cfg.min_lr_ratio)
    elif cfg.schedule == "wsd":
        decay = max(int(round(rest * cfg.decay_fraction)), 1)
        after = optax.join_schedules(
            [optax.constant_schedule(cfg.lr), optax.linear_schedule(cfg.lr, end, decay)], [rest - decay])
    else:
        after = optax.constant_schedule(cfg.lr)
    if warmup == 0:
        return after
    return optax.join_schedules([optax.linear_schedule(cfg.lr / warmup, cfg.lr, warmup - 1), after], [warmup])


def _path_name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def decay_mask(params):
    """True for parameters that get weight decay: matrices and embeddings, not norms, biases or gate parameters."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: x.ndim >= 2 and not NO_DECAY.search(_path_name(path)), params)


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    parts = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip > 0 else []
    parts.append(optax.adamw(learning_rate(cfg, total_steps), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                             weight_decay=cfg.weight_decay, mask=decay_mask))
    return optax.chain(*parts)
