"""Per-channel standardisation, and its exact inverse.

Models train on normalised inputs; attacks reconstruct in that space and are scored in [0, 1] image space,
so ``denormalize`` must undo ``normalize`` exactly with the very statistics the client used.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MODES = ("global", "client", "none")


@dataclass(frozen=True)
class ChannelStats:
    """Channel means and standard deviations of the data a model is fed."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.mean) != len(self.std):
            raise ValueError(f"ChannelStats: {len(self.mean)} means but {len(self.std)} stds")
        if not all(s > 0 for s in self.std):
            raise ValueError(f"ChannelStats: std must be positive, got {self.std}")

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std per channel, for (N, C, H, W) or (C, H, W) tensors."""
        return (x - self._shaped(self.mean, x)) / self._shaped(self.std, x)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Back from model space to [0, 1] image space."""
        return x * self._shaped(self.std, x) + self._shaped(self.mean, x)

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChannelStats:
        return cls(mean=tuple(float(v) for v in data["mean"]), std=tuple(float(v) for v in data["std"]))

    @staticmethod
    def _shaped(values: tuple[float, ...], like: torch.Tensor) -> torch.Tensor:
        # (C, 1, 1) broadcasts over the trailing (C, H, W) of both batched and single images.
        return torch.tensor(values, dtype=like.dtype, device=like.device).view(-1, 1, 1)


def channel_stats(x: np.ndarray, mode: str, global_x: np.ndarray | None = None) -> ChannelStats:
    """Statistics for ``data.normalize``: of ``global_x`` (whole training set), of ``x`` (client's own), or none."""
    if mode not in MODES:
        raise ValueError(f"normalize mode {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "none":
        channels = int(x.shape[1])
        return ChannelStats(mean=(0.0,) * channels, std=(1.0,) * channels)
    if mode == "client":
        return _measure(x)
    if global_x is None:
        raise ValueError("channel_stats(mode='global') needs global_x, the whole training set")
    return _training_set_stats(global_x)


# Global statistics are asked for once per client, always of the same training-set array (load_dataset hands
# out one shared, never-modified copy per process); remembering the answer for that very array object turns
# N passes over the whole training set into one. A weak reference, so the cache never keeps a data set alive.
_GLOBAL_STATS: dict[int, tuple[weakref.ref[np.ndarray], ChannelStats]] = {}


def _training_set_stats(global_x: np.ndarray) -> ChannelStats:
    cached = _GLOBAL_STATS.get(id(global_x))
    if cached is not None and cached[0]() is global_x:
        return cached[1]
    stats = _measure(global_x)
    _GLOBAL_STATS.clear()  # one training set per process is the norm; keep just the latest
    _GLOBAL_STATS[id(global_x)] = (weakref.ref(global_x), stats)
    return stats


def _measure(x: np.ndarray) -> ChannelStats:
    if x.ndim != 4 or len(x) == 0:
        raise ValueError(f"channel_stats needs a non-empty (N, C, H, W) array, got shape {x.shape}")
    # torch reduces float32 accurately without the float64 copy numpy's std would make of the whole set.
    std, mean = torch.std_mean(torch.from_numpy(np.ascontiguousarray(x)), dim=(0, 2, 3), correction=0)
    # A constant channel (a blank-border data set, a one-sample client) keeps std 1 instead of dividing by 0.
    safe_std = torch.where(std > 0, std, torch.ones_like(std))
    return ChannelStats(mean=tuple(mean.tolist()), std=tuple(safe_std.tolist()))
