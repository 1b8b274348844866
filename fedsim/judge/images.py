"""PNG figures of an attack: originals over their paired reconstructions, and convergence curves.

Written headless with matplotlib's Agg backend, as ``fedsim.reporting`` does. The image grid is placed
pixel for pixel (``figimage``, no resampling), so its size in pixels is known in advance and tiny
images stay sharp: each image is enlarged by an integer nearest-neighbour factor to at least
``MIN_TILE`` px, so 8x8 digits show as 64x64 blocks rather than a blur.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

MIN_TILE = 64  # smallest displayed side of one image, px
PAD = 2  # white gap between images, px
BLOCK_GAP = 8  # extra gap between (originals, reconstructions) row pairs when images wrap, px
TITLE_BAND = 28  # px above the grid holding the title, when there is one
MAX_COLUMNS = 16  # images per row before wrapping into another originals/reconstructions pair
DPI = 100


def tile_scale(height: int, width: int) -> int:
    """Integer nearest-neighbour enlargement that brings the shorter side to at least ``MIN_TILE`` px."""
    return max(1, math.ceil(MIN_TILE / min(height, width)))


def grid_shape(num_images: int, height: int, width: int, title: bool) -> tuple[int, int]:
    """(height, width) in pixels of the PNG ``save_grid`` writes for these images."""
    scale = tile_scale(height, width)
    columns = min(num_images, MAX_COLUMNS)
    blocks = math.ceil(num_images / MAX_COLUMNS)
    tile_h, tile_w = height * scale, width * scale
    grid_w = PAD + columns * (tile_w + PAD)
    grid_h = blocks * (PAD + 2 * (tile_h + PAD)) + (blocks - 1) * BLOCK_GAP
    return grid_h + (TITLE_BAND if title else 0), grid_w


def _to_rgb_tiles(images: torch.Tensor, scale: int) -> np.ndarray:
    """(N, C, H, W) [0, 1] -> (N, H*s, W*s, 3) float array; grayscale repeated to RGB."""
    x = images.detach().cpu().float().clamp(0.0, 1.0)
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    elif x.shape[1] != 3:
        raise ValueError(f"save_grid shows 1- or 3-channel images, got {x.shape[1]} channels")
    x = x.repeat_interleave(scale, dim=2).repeat_interleave(scale, dim=3)
    return x.permute(0, 2, 3, 1).numpy()


def _canvas(originals: torch.Tensor, reconstructions: torch.Tensor) -> np.ndarray:
    num, _, height, width = originals.shape
    scale = tile_scale(height, width)
    tiles = (_to_rgb_tiles(originals, scale), _to_rgb_tiles(reconstructions, scale))
    grid_h, grid_w = grid_shape(num, height, width, title=False)
    canvas = np.ones((grid_h, grid_w, 3), dtype=np.float32)
    tile_h, tile_w = height * scale, width * scale
    for i in range(num):
        block, column = divmod(i, MAX_COLUMNS)
        left = PAD + column * (tile_w + PAD)
        block_top = block * (PAD + 2 * (tile_h + PAD) + BLOCK_GAP) + PAD
        for row, source in enumerate(tiles):
            top = block_top + row * (tile_h + PAD)
            canvas[top : top + tile_h, left : left + tile_w] = source[i]
    return canvas


def save_grid(
    path: Path | str, originals: torch.Tensor, reconstructions: torch.Tensor, title: str | None = None
) -> Path:
    """Write originals (top row) over their paired reconstructions (row below) as a PNG.

    Both are [0, 1] ``(N, C, H, W)`` tensors already paired (``AttackScore.truth_index`` / ``rec_index``),
    so column i compares one pair. More than ``MAX_COLUMNS`` images wrap into further row pairs. The PNG
    is exactly ``grid_shape(N, H, W, title is not None)`` pixels.
    """
    if originals.ndim != 4 or originals.shape != reconstructions.shape or len(originals) == 0:
        raise ValueError(
            f"save_grid needs two non-empty paired (N, C, H, W) tensors of one shape, "
            f"got {tuple(originals.shape)} and {tuple(reconstructions.shape)}"
        )
    path = Path(path)
    canvas = _canvas(originals, reconstructions)
    height = canvas.shape[0] + (TITLE_BAND if title is not None else 0)
    fig = plt.figure(figsize=(canvas.shape[1] / DPI, height / DPI), dpi=DPI, facecolor="white")
    try:
        fig.figimage(canvas, xo=0, yo=0, origin="upper")
        if title is not None:
            # Shrink the title to the grid's width (a glyph is about 0.6 em wide) rather than clip it.
            fontsize = min(10.0, canvas.shape[1] * 72 / (DPI * 0.6 * max(len(title), 1)))
            fig.text(0.5, 1.0 - (TITLE_BAND / 2) / height, title, ha="center", va="center", fontsize=fontsize)
        fig.savefig(path, dpi=DPI, facecolor="white")
    finally:
        plt.close(fig)
    return path


def _floats(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    """Column of a trajectory table with None (no finite value) as NaN, which matplotlib leaves as a gap."""
    return [float("nan") if row.get(key) is None else float(row[key]) for row in rows]


def plot_trajectory(path: Path | str, trajectory_rows: Sequence[dict[str, Any]], title: str | None = None) -> Path:
    """Objective (log scale when all positive, else symlog) over iterations, and mean PSNR / SSIM below.

    ``trajectory_rows`` are ``fedsim.judge.scoring.score_trajectory`` rows.
    """
    if not trajectory_rows:
        raise ValueError("plot_trajectory needs at least one trajectory row")
    path = Path(path)
    iterations = [int(row["iteration"]) for row in trajectory_rows]
    objective = _floats(trajectory_rows, "objective")
    finite_objective = [v for v in objective if math.isfinite(v)]
    fig, (objective_axis, psnr_axis) = plt.subplots(2, 1, figsize=(6, 5), dpi=120, sharex=True)
    try:
        objective_axis.plot(iterations, objective, marker=".", color="tab:gray")
        objective_axis.set_yscale("log" if finite_objective and min(finite_objective) > 0 else "symlog")
        objective_axis.set_ylabel("attack objective")
        objective_axis.grid(alpha=0.3)
        if title:
            objective_axis.set_title(title)
        psnr_axis.plot(iterations, _floats(trajectory_rows, "psnr"), marker=".", color="tab:blue")
        psnr_axis.set_ylabel("mean PSNR (dB)", color="tab:blue")
        psnr_axis.set_xlabel("iteration")
        psnr_axis.grid(alpha=0.3)
        ssim_axis = psnr_axis.twinx()
        ssim_axis.plot(iterations, _floats(trajectory_rows, "ssim"), marker=".", color="tab:green")
        ssim_axis.set_ylabel("mean SSIM", color="tab:green")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
