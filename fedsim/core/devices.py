"""Resolve the configured device string to a torch device."""

from __future__ import annotations

import torch

from fedsim.core.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present; an explicit `cuda` without a GPU is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device = '{name}': no CUDA GPU is visible; allowed here: auto, cpu")
    return torch.device(name)
