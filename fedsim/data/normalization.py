"""Per-channel standardisation, and its exact inverse.

Models train on normalised inputs; attacks reconstruct in that space and are scored in [0, 1] image space,
so ``denormalize`` must undo ``normalize`` exactly with the very statistics the client used. Token ids (text) are
not normalised: their statistics have no channel (``TOKEN_IDS``), and pass inputs through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        """(x - mean) / std per channel, for (N, C, H, W) or (C, H, W) tensors; no channel: ``x`` as it is."""
        if not self.mean:
            return x
        return (x - self._shaped(self.mean, x)) / self._shaped(self.std, x)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Back from model space to [0, 1] image space."""
        if not self.mean:
            return x
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


#: the statistics of token ids: none (a text model embeds integer ids, which no affine map may touch)
TOKEN_IDS = ChannelStats(mean=(), std=())


def federation_stats(
    x_train: np.ndarray, partitions: Sequence[np.ndarray], mode: str
) -> tuple[tuple[ChannelStats, ...], ChannelStats]:
    """Each client's statistics for ``data.normalize``, and the server's (for the test set).

    ``global``: every client and the server use the training set's statistics (a federation-wide
    constant, like the usual CIFAR mean/std). ``client``: each client measures its own data; the
    server, which holds none, uses the training set's. ``none``: identity.
    """
    if mode not in MODES:
        raise ValueError(f"normalize mode {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "none":
        identity = ChannelStats(mean=(0.0,) * x_train.shape[1], std=(1.0,) * x_train.shape[1])
        return tuple(identity for _ in partitions), identity
    shared = channel_stats(x_train)
    if mode == "global":
        return tuple(shared for _ in partitions), shared
    return tuple(channel_stats(x_train[ids]) for ids in partitions), shared


def channel_stats(x: np.ndarray) -> ChannelStats:
    """Per-channel mean and (population) std of an (N, C, H, W) array."""
    if x.ndim != 4 or len(x) == 0:
        raise ValueError(f"channel_stats needs a non-empty (N, C, H, W) array, got shape {x.shape}")
    # torch reduces float32 accurately without the float64 copy numpy's std would make of the whole set.
    std, mean = torch.std_mean(torch.from_numpy(np.ascontiguousarray(x)), dim=(0, 2, 3), correction=0)
    # A constant channel (a blank-border data set, a one-sample client) keeps std 1 instead of dividing by 0.
    safe_std = torch.where(std > 0, std, torch.ones_like(std))
    return ChannelStats(mean=tuple(mean.tolist()), std=tuple(safe_std.tolist()))
