"""Building blocks shared by the built-in models: activations, normalisation layers, size arithmetic."""

from __future__ import annotations

from torch import nn

#: cfg.activation -> module class; every model takes its hidden non-linearity from here.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
}

NORMS = ("batch", "group", "none")


def make_activation(name: str) -> nn.Module:
    """A fresh activation module (never in-place: attacks differentiate through activations twice)."""
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation '{name}'; allowed: {', '.join(ACTIVATIONS)}") from None


def group_count(channels: int, max_groups: int = 32) -> int:
    """The largest divisor of ``channels`` that is at most ``max_groups`` (GroupNorm needs a divisor)."""
    return max(g for g in range(1, min(max_groups, channels) + 1) if channels % g == 0)


def make_norm2d(kind: str, channels: int) -> nn.Module:
    """BatchNorm2d, GroupNorm (up to 32 groups) or Identity for ``cfg.norm`` = batch / group / none."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(group_count(channels), channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm '{kind}'; allowed: {', '.join(NORMS)}")


def make_dropout(p: float) -> nn.Module:
    """Dropout before a classifier, or a parameter-free Identity so state_dict keys do not depend on p."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Spatial side after a convolution or pooling layer (floor mode, no dilation)."""
    return (size + 2 * padding - kernel) // stride + 1
