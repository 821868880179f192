"""ccq_jax.figures: every command's PNG is a 256-colour palette that keeps the figure's colours."""

import io

import numpy as np
import pytest
from PIL import Image

from ccq_jax.figures import pyplot, save_png


def _figure():
    fig, ax = pyplot().subplots(figsize=(4, 3))
    xs = np.linspace(0, 6, 200)
    for shift, colour in zip(range(5), ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]):
        ax.plot(xs, np.sin(xs + shift), color=colour, label=str(shift))
    ax.scatter(xs[::10], np.cos(xs[::10]), alpha=0.5)
    ax.legend()
    ax.set_title("palette test")
    return fig


def test_palette_png_keeps_the_colours_and_is_smaller(tmp_path):
    fig = _figure()
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=100)
    reference = np.asarray(Image.open(io.BytesIO(rgba.getvalue())).convert("RGB"), dtype=np.int16)

    path = save_png(_figure(), tmp_path / "nested" / "fig.png", dpi=100)
    assert path == tmp_path / "nested" / "fig.png"
    with Image.open(path) as stored:
        assert stored.mode == "P"
        pixels = np.asarray(stored.convert("RGB"), dtype=np.int16)
    assert pixels.shape == reference.shape
    error = np.abs(pixels - reference).max(axis=-1)
    assert np.mean(error <= 8) > 0.99, "the palette moved more than 1 % of the pixels by more than 8 levels"
    for colour in [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]:  # the lines
        distance = np.abs(pixels - np.array(colour)).max(axis=-1)
        assert distance.min() <= 4, f"colour {colour} lost from the palette"
    assert path.stat().st_size < len(rgba.getvalue())


def test_figure_is_closed_and_tight_crops(tmp_path):
    plt = pyplot()
    fig = _figure()
    number = fig.number
    loose = save_png(fig, tmp_path / "loose.png", dpi=80)
    assert not plt.fignum_exists(number)
    tight = save_png(_figure(), tmp_path / "tight.png", dpi=80, tight=True)
    with Image.open(loose) as a, Image.open(tight) as b:
        assert a.size == (320, 240)
        assert b.size != a.size


def test_rejects_a_name_that_is_not_png(tmp_path):
    fig = _figure()
    with pytest.raises(ValueError, match=r"path: expected a file name ending in \.png"):
        save_png(fig, tmp_path / "fig.jpg")
    pyplot().close(fig)
