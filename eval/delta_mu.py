"""Delta-mu: how far the needle's key lies from the principal subspace of the key covariance (CCQ paper).

For one prompt, layer and head, with the query at position t:
- keys are L2-normalised (`ccq_jax.ops.ccq_keys`, the CCQ read's convention) and
  Sigma_t = (1/n) sum_{j<=t} k^_j k^_j^T - mu mu^T, mu = (1/n) sum_{j<=t} k^_j, n = t + 1
  (the covariance the CCQ read contracts the query with; `centered=False` drops mu mu^T);
- P is the projector on the eigenvectors of Sigma_t with the `top_k` largest eigenvalues;
- the alignment of key j is the fraction of its energy in that subspace, ||P k^_j||^2 / ||k^_j||^2;
- Delta-mu = mean alignment of the needle tokens - mean alignment of the other tokens j <= t
  (the distractors). Negative: the needle lies further from the principal subspace than the
  bulk, i.e. in directions CCQ's contraction (I - lambda Sigma) keeps.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ccq_jax.ops import ccq_keys
from eval.plots import heatmap, histograms


@partial(jax.jit, static_argnames="centered")
def _sigma(k_hat: jax.Array, centered: bool) -> jax.Array:
    """[H, K, K] covariance of the normalised keys `k_hat [n, H, K]`."""
    sigma = jnp.einsum("thk,thj->hkj", k_hat, k_hat, precision="highest") / k_hat.shape[0]
    if centered:
        mu = jnp.mean(k_hat, axis=0)
        sigma = sigma - mu[:, :, None] * mu[:, None, :]
    return sigma


def key_alignment(keys, query_position: int, *, top_k: int = 16, centered: bool = True) -> np.ndarray:
    """[H, query_position + 1] alignment of every key up to the query with the top-k subspace of Sigma.

    keys: [T, H, K] one layer's keys for one prompt.
    """
    keys = jnp.asarray(keys)
    if keys.ndim != 3:
        raise ValueError(f"keys: expected [T, H, K], got shape {keys.shape}")
    t, _, k_dim = keys.shape
    if not 0 <= query_position < t:
        raise ValueError(f"query_position: expected an index in [0, {t}), got {query_position}")
    if not 1 <= top_k < k_dim:
        raise ValueError(f"top_k: expected 1 <= top_k < K={k_dim} (else every key lies in the subspace), got {top_k}")
    k_hat = ccq_keys(keys[: query_position + 1], normalize_keys=True)
    _, vecs = jnp.linalg.eigh(_sigma(k_hat, centered))  # eigenvalues ascending
    basis = vecs[..., -top_k:]  # [H, K, top_k]
    energy_in = jnp.sum(jnp.einsum("thk,hkr->htr", k_hat, basis, precision="highest") ** 2, axis=-1)
    return np.asarray(energy_in / jnp.sum(k_hat * k_hat, axis=-1).T)


@dataclass(frozen=True)
class DeltaMu:
    """Alignments for one prompt: `per_token [L, H, query_position + 1]`, needle token positions."""

    per_token: np.ndarray
    needle_positions: tuple[int, ...]

    @property
    def needle_mask(self) -> np.ndarray:
        """[query_position + 1] bool, True at the needle tokens."""
        mask = np.zeros(self.per_token.shape[-1], bool)
        mask[list(self.needle_positions)] = True
        return mask

    @property
    def needle(self) -> np.ndarray:
        """[L, H] mean alignment of the needle tokens."""
        return self.per_token[..., self.needle_mask].mean(axis=-1)

    @property
    def distractor(self) -> np.ndarray:
        """[L, H] mean alignment of the other tokens up to the query."""
        return self.per_token[..., ~self.needle_mask].mean(axis=-1)

    @property
    def delta(self) -> np.ndarray:
        """[L, H] Delta-mu = needle - distractor."""
        return self.needle - self.distractor


def delta_mu(
    keys_per_layer: Sequence,
    needle_positions: Sequence[int],
    query_position: int,
    *,
    top_k: int = 16,
    centered: bool = True,
) -> DeltaMu:
    """Delta-mu of one prompt from its per-layer keys `[L][T, H, K]` (see the module docstring)."""
    positions = tuple(sorted({int(p) for p in needle_positions}))
    if not positions or positions[0] < 0 or positions[-1] > query_position:
        raise ValueError(
            f"needle_positions: expected a non-empty set of positions in [0, {query_position}], "
            f"got {list(needle_positions)}"
        )
    if len(positions) == query_position + 1:
        raise ValueError("needle_positions: every token up to the query is a needle token; no distractor is left")
    if not keys_per_layer:
        raise ValueError("keys_per_layer: expected one [T, H, K] array per layer, got none")
    per_token = np.stack([key_alignment(k, query_position, top_k=top_k, centered=centered) for k in keys_per_layer])
    return DeltaMu(per_token=per_token, needle_positions=positions)


def summarize(results: Sequence[DeltaMu]) -> dict:
    """Means over prompts: `needle`, `distractor`, `delta` as [L, H] lists, and a per-layer table."""
    needle = np.mean([r.needle for r in results], axis=0)
    distractor = np.mean([r.distractor for r in results], axis=0)
    delta = needle - distractor
    table = [
        {
            "layer": layer,
            "needle": float(needle[layer].mean()),
            "distractor": float(distractor[layer].mean()),
            "delta_mu": float(delta[layer].mean()),
            "heads_negative": float(np.mean(delta[layer] < 0)),
        }
        for layer in range(delta.shape[0])
    ]
    return {
        "num_prompts": len(results),
        "needle": needle.tolist(),
        "distractor": distractor.tolist(),
        "delta_mu": delta.tolist(),
        "mean_delta_mu": float(delta.mean()),
        "layers": table,
    }


def format_table(summary: dict) -> str:
    """The per-layer table as aligned text."""
    lines = [f"{'layer':>5} {'needle':>8} {'distract':>8} {'delta_mu':>9} {'heads<0':>7}"]
    for row in summary["layers"]:
        lines.append(
            f"{row['layer']:>5} {row['needle']:>8.4f} {row['distractor']:>8.4f} {row['delta_mu']:>+9.4f} "
            f"{row['heads_negative']:>7.0%}"
        )
    lines.append(f"mean Delta-mu over layers and heads: {summary['mean_delta_mu']:+.4f} ({summary['num_prompts']} prompts)")
    return "\n".join(lines)


def plot_heatmap(summary: dict, path, *, title: str = "Delta-mu (needle - distractor alignment)"):
    """PNG heatmap of Delta-mu, layers (rows) x heads (columns), blue negative, red positive."""
    delta = np.asarray(summary["delta_mu"])
    bound = float(np.max(np.abs(delta))) or 1.0
    return heatmap(
        delta, path, row_labels=list(range(delta.shape[0])), col_labels=list(range(delta.shape[1])), xlabel="head",
        ylabel="layer", title=title, cbar_label="Delta-mu", cmap="RdBu_r", vmin=-bound, vmax=bound,
    )


def plot_histograms(results: Sequence[DeltaMu], path):
    """PNG with one panel per layer: histogram of distractor alignments (mean over heads, pooled over prompts)
    and a line at each prompt's needle alignment."""
    num_layers = results[0].per_token.shape[0]
    panels = {}
    for layer in range(num_layers):
        bulk = np.concatenate([r.per_token[layer].mean(axis=0)[~r.needle_mask] for r in results])
        marked = [float(r.per_token[layer].mean(axis=0)[r.needle_mask].mean()) for r in results]
        panels[f"layer {layer}"] = (bulk, marked)
    return histograms(
        panels, path, xlabel="alignment with top-k subspace", bulk_label="distractor tokens", marker_label="needle",
        title="Per-token alignment (mean over heads)",
    )
