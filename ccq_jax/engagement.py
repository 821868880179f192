"""How engaged a CCQ read is: the gate, the contraction it applies, and the covariance it applies it with.

For every CCQ layer and head of a model on a batch of tokens (`read_engagement`):
- lambda_t: mean and quantiles over tokens;
- the applied contraction |q_t - q_clean_t| / |q_t| (the layer's own read policy, `ccq_jax.ops.ccq_query` on the
  queries and keys the layer read with), over all tokens and over the `positions` given (e.g. MQAR's queries);
- the available contraction |Sigma_t q_t| / |q_t| (what lambda = 1 would remove in the first-order read);
- Sigma at the last token of each row: its top eigenvalues, trace and effective rank exp(H(p)) with p the
  eigenvalues over their sum (Roy and Vetterli 2007: 1 for a rank-one Sigma, K for an isotropic one).
For unit keys tr Sigma <= 1, so |lambda Sigma q| <= lambda eig_max |q|: a near-isotropic Sigma of width K has
eig_max ~ 1/K and the first-order read barely moves q. Every CCQ result should state these numbers.

    report = read_engagement(model, input_ids, segment_ids=None, positions=None)
    print(format_table(report))

`ccq-eval read` runs it on a checkpoint and draws it; training runs it on held-out rows at the end of a CCQ
model's run (summary.json); `study.hub_mqar` on every member.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import ccq_jax.ops as ops

QUANTILES = (0.1, 0.5, 0.9)
TOP_EIGENVALUES = 4


@functools.partial(jax.jit, static_argnums=0)
def _captured(graphdef, state, input_ids, segment_ids):
    _, captured = nnx.capture(nnx.merge(graphdef, state), nnx.Intermediate)(input_ids, segment_ids=segment_ids)
    return captured


@functools.partial(jax.jit, static_argnames=("read", "centered", "normalize_keys"))
def layer_engagement(q, k, lam, segment_ids, positions, *, read, centered, normalize_keys):
    """Engagement arrays of one layer: q, k [B, T, H, K], lam [B, T, H], positions [B, T] bool (the tokens of the
    second contraction average). Returns a dict of [H] arrays (and [H, TOP_EIGENVALUES] for `sigma_top`)."""
    q32 = q.astype(jnp.float32)
    kw = dict(centered=centered, normalize_keys=normalize_keys, segment_ids=segment_ids, impl="chunk")
    q_clean, _ = ops.ccq_query(q32, k, lam, read=read, **kw)
    sigma_q, stats = ops.covariance_apply(q32, k, output_final_stats=True, **kw)
    q_norm = jnp.maximum(jnp.linalg.norm(q32, axis=-1), 1e-30)
    applied = jnp.linalg.norm(q32 - q_clean, axis=-1) / q_norm  # [B, T, H]
    available = jnp.linalg.norm(sigma_q, axis=-1) / q_norm
    n = stats.count[..., None, None]
    mean = stats.key_sum / stats.count[..., None]
    sigma = stats.cov / n - (mean[..., :, None] * mean[..., None, :] if centered else 0)
    eig = jnp.clip(jnp.linalg.eigvalsh(sigma)[..., ::-1], 0, None)  # [B, H, K] descending
    p = eig / jnp.maximum(jnp.sum(eig, axis=-1, keepdims=True), 1e-30)
    rank = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0), axis=-1))
    weights = positions.astype(jnp.float32)[..., None]  # [B, T, 1]
    at = lambda x: jnp.sum(x * weights, axis=(0, 1)) / jnp.maximum(jnp.sum(weights, axis=(0, 1)), 1)
    lam_flat = jnp.moveaxis(lam, -1, 0).reshape(lam.shape[-1], -1)
    return {"lambda_mean": jnp.mean(lam, axis=(0, 1)),
            **{f"lambda_p{int(100 * x)}": jnp.quantile(lam_flat, x, axis=1) for x in QUANTILES},
            "applied_mean": jnp.mean(applied, axis=(0, 1)), "applied_at_positions": at(applied),
            "available_mean": jnp.mean(available, axis=(0, 1)), "available_at_positions": at(available),
            "sigma_top": jnp.mean(eig[..., :TOP_EIGENVALUES], axis=0), "sigma_trace": jnp.mean(jnp.sum(eig, -1), 0),
            "effective_rank": jnp.mean(rank, axis=0)}


def read_engagement(model, input_ids, *, segment_ids=None, positions=None) -> dict:
    """The engagement of every CCQ layer of `model` (a `CausalLM`) on `input_ids` [B, T].

    positions: [B, T] bool, the tokens whose contraction is also averaged alone (None: none; its figures are
    then 0, and `format_table` shows "-"). Returns {"layers": [{"layer", "read", "heads": {name: [per head]}}],
    "summary": {name: mean over layers and heads}, "num_positions": the positions' count}; layers without a CCQ
    read (or with it off) are left out, and a model with none is a ValueError.
    """
    cfg = getattr(model.config, "ccq", None)
    if cfg is None or not cfg.active:
        raise ValueError(f"model: no CCQ read to measure (family {model.config.family!r}, ccq "
                         f"{'off' if cfg is not None else 'absent'})")
    input_ids = jnp.asarray(input_ids, jnp.int32)
    b, t = input_ids.shape
    segment_ids = jnp.ones((b, t), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)
    positions = jnp.zeros((b, t), bool) if positions is None else jnp.asarray(positions, bool)
    graphdef, state = nnx.split(model)
    layers = _captured(graphdef, state, input_ids, segment_ids)["layers"]
    out = []
    for i in range(len(model.layers)):
        attn = layers[i]["attn"]
        if "ccq_lambda" not in attn:
            continue
        arrays = layer_engagement(attn["queries"][0], attn["keys"][0], attn["ccq_lambda"][0], segment_ids,
                                  positions, read=cfg.policy, centered=cfg.centered,
                                  normalize_keys=cfg.normalize_keys)
        out.append({"layer": i, "read": cfg.policy._asdict(),
                    "heads": {name: np.asarray(a).tolist() for name, a in arrays.items()}})
    summary = {name: float(np.mean([np.mean(layer["heads"][name]) for layer in out])) for name in out[0]["heads"]}
    summary["sigma_top1"] = float(np.mean([np.asarray(layer["heads"]["sigma_top"])[:, 0] for layer in out]))
    return {"layers": out, "summary": summary, "num_positions": int(jnp.sum(positions))}


def format_table(report: dict) -> str:
    """One line per layer and head: lambda, the contraction applied (all tokens, at the positions), Sigma."""
    at = (lambda x: f"{x:.2%}") if report["num_positions"] else (lambda x: "-")  # no positions: nothing averaged
    lines = [f"{'layer':>5} {'head':>4} {'lambda':>7} {'p90':>6} {'applied':>8} {'at pos':>7} {'avail':>7} "
             f"{'eig1':>7} {'tr':>6} {'eff.rank':>8}"]
    for layer in report["layers"]:
        hd = layer["heads"]
        for h in range(len(hd["lambda_mean"])):
            lines.append(f"{layer['layer']:>5} {h:>4} {hd['lambda_mean'][h]:7.3f} {hd['lambda_p90'][h]:6.3f} "
                         f"{hd['applied_mean'][h]:8.2%} {at(hd['applied_at_positions'][h]):>7} "
                         f"{hd['available_mean'][h]:7.2%} {hd['sigma_top'][h][0]:7.4f} {hd['sigma_trace'][h]:6.3f} "
                         f"{hd['effective_rank'][h]:8.1f}")
    s = report["summary"]
    positions = f" ({at(s['applied_at_positions'])} at the positions)" if report["num_positions"] else ""
    lines.append(f"mean: lambda {s['lambda_mean']:.3f}, applied contraction {s['applied_mean']:.2%}{positions}, "
                 f"eig_max {s['sigma_top1']:.4f}, effective rank {s['effective_rank']:.1f}")
    return "\n".join(lines)

