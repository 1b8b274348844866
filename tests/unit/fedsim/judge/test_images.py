"""Image grids and trajectory plots written as PNGs."""

import numpy as np
import pytest
from image_pairs import _pair
from PIL import Image

from fedsim.judge import images


@pytest.mark.parametrize("count, channels, side, title", [(4, 1, 8, None), (20, 3, 32, "round 3")])
def test_save_grid_writes_a_png_of_the_expected_size(tmp_path, count, channels, side, title):
    originals, recovered = _pair(count, channels, side)
    path = images.save_grid(tmp_path / "grid.png", originals, recovered, title=title)
    assert path.stat().st_size > 0
    height, width = images.grid_shape(count, side, side, title=title is not None)
    with Image.open(path) as png:
        assert png.size == (width, height)
        pixels = np.asarray(png.convert("RGB"))
    scale = images.tile_scale(side, side)
    assert side * scale >= 64
    top = (images.TITLE_BAND if title else 0) + images.PAD
    first = originals[0].repeat(3 // channels, 1, 1).permute(1, 2, 0).numpy()
    shown = pixels[top : top + side * scale : scale, images.PAD : images.PAD + side * scale : scale] / 255.0
    assert np.abs(shown - first).max() < 1 / 255 + 1e-6  # nearest enlargement: each pixel is a block


def test_plot_trajectory_writes_a_png(tmp_path):
    rows = [
        {"iteration": 0, "objective": 1.0, "psnr": 8.0, "ssim": 0.05},
        {"iteration": 5, "objective": 0.1, "psnr": 20.0, "ssim": 0.6},
        {"iteration": 9, "objective": 0.01, "psnr": None, "ssim": 1.0},
    ]
    path = images.plot_trajectory(tmp_path / "trajectory.png", rows)
    assert path.stat().st_size > 0
