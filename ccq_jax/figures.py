"""The one home of the PNG figures every command draws: matplotlib off-screen, files stored as palettes.

`pyplot()` gives matplotlib's pyplot on the Agg backend (no display needed), imported when a figure is drawn,
not when a module that can draw is imported. `save_png(fig, path)` renders the figure, stores it as a
256-colour palette PNG (line plots, markers and heatmaps of a few colours; about a third of matplotlib's RGBA
file, which keeps results/ small enough to travel with a GPU call) and closes the figure.
"""

import io
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path, *, dpi: int = 120, tight: bool = False) -> Path:
    """Write `fig` to `path` as a 256-colour palette PNG (parents created), close it, return the path.

    tight=True crops the canvas to the drawn content (matplotlib's bbox_inches="tight").
    """
    from PIL import Image

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path: expected a file name ending in .png, got {str(path)!r}")
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    pyplot().close(fig)
    rendered.seek(0)
    with Image.open(rendered) as image:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    path.parent.mkdir(parents=True, exist_ok=True)
    palette.save(path, optimize=True)
    return path
