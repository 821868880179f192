"""PNG figures of the evaluations (matplotlib, Agg backend): curves, heatmaps and histograms.

matplotlib is imported when a figure is drawn, not when the evaluation modules are imported.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ccq_jax.figures import pyplot, save_png


def line_plot(
    curves: Mapping[str, Mapping[float, float]], path, *, xlabel: str, ylabel: str, title: str = ""
) -> Path:
    """One line per name through its (x, y) points, sorted by x, on a log2 x axis (e.g. perplexity vs length)."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    for name, points in curves.items():
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_png(fig, path, tight=True)


def heatmap(
    values,
    path,
    *,
    row_labels: Sequence,
    col_labels: Sequence,
    xlabel: str,
    ylabel: str,
    title: str = "",
    cbar_label: str = "",
    cmap: str = "RdYlGn",
    vmin: float | None = None,
    vmax: float | None = None,
) -> Path:
    """A [rows, cols] matrix as coloured cells, labelled, with the values written in when it is small."""
    values = np.asarray(values, dtype=float)
    if values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values: expected shape {(len(row_labels), len(col_labels))}, got {values.shape}")
    fig, ax = pyplot().subplots(figsize=(max(4.0, 0.6 * len(col_labels) + 2), max(3.0, 0.35 * len(row_labels) + 1.5)))
    im = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(col_labels)), [str(c) for c in col_labels])
    ax.set_yticks(range(len(row_labels)), [str(r) for r in row_labels])
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if values.size <= 400:
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2g}" if abs(v) < 1 else f"{v:.0f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label=cbar_label)
    return save_png(fig, path, tight=True)


def histograms(
    panels: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path,
    *,
    xlabel: str,
    bulk_label: str,
    marker_label: str,
    title: str = "",
) -> Path:
    """One panel per name: a histogram of the bulk values and vertical lines at the marked values."""
    n = len(panels)
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, (bulk, marked)) in zip(axes.flat, panels.items()):
        ax.hist(np.asarray(bulk, float), bins=40, color="tab:blue", alpha=0.7, label=bulk_label)
        for i, m in enumerate(np.asarray(marked, float).reshape(-1)):
            ax.axvline(m, color="tab:red", linewidth=2, label=marker_label if i == 0 else None)
        ax.set(title=name, xlabel=xlabel)
    for ax in axes.flat[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_png(fig, path, tight=True)
