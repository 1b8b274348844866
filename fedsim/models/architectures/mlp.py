"""The MLP-3/4/5 attacked models of the GGSS-R paper (paper 002)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.layers import make_activation, make_dropout
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig, ModelBuilder

#: Hidden layer sizes from paper 002, appendix ("MLP-5 ... 1028, 512, 256, and 64 units" - 1028 sic).
MLP_HIDDEN: dict[str, tuple[int, ...]] = {
    "mlp3": (512, 128),
    "mlp4": (512, 256, 64),
    "mlp5": (1028, 512, 256, 64),
}


class MlpConfig(LayeredModelConfig):
    name: Literal["mlp3", "mlp4", "mlp5"]
    activation: Activation | None = Field(None, description="activation after each hidden layer (null = relu)")
    width: int | None = Field(
        None,
        ge=1,
        description="units of the first hidden layer; the others keep their ratio to it (null = the paper's)",
    )


class MLP(nn.Module):
    """A multilayer perceptron on flattened images (paper 002's MLP-3/4/5): Linear + activation per hidden layer."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: Sequence[int],
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        previous = in_features
        for units in hidden:
            layers += [nn.Linear(previous, units), make_activation(activation)]
            previous = units
        self.hidden = nn.Sequential(*layers)
        self.dropout = make_dropout(dropout)
        self.classifier = nn.Linear(previous, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.hidden(x)))


def scaled_hidden(default: Sequence[int], width: int | None) -> tuple[int, ...]:
    """``width`` replaces the first hidden size; later layers keep their ratio to it (at least 1 unit)."""
    if width is None:
        return tuple(default)
    return tuple(max(1, round(units * width / default[0])) for units in default)


def _builder(name: str) -> ModelBuilder:
    """One builder per depth; they differ only in the hidden sizes."""

    def build(cfg: MlpConfig, in_channels: int, num_classes: int, image_size: int) -> MLP:
        return MLP(
            in_channels * image_size * image_size,
            num_classes,
            scaled_hidden(MLP_HIDDEN[name], cfg.width),
            activation=cfg.activation or "relu",
            dropout=cfg.dropout,
        )

    build.__name__ = f"build_{name}"
    return build


for _name, _sizes in MLP_HIDDEN.items():
    MODELS.register(
        _name,
        help=f"MLP-{len(_sizes) + 1} of the GGSS-R paper (Enhanced Privacy Leakage from Noise-Perturbed "
        f"Gradients): hidden {'-'.join(map(str, _sizes))}, relu by default",
        config=MlpConfig,
    )(_builder(_name))

del _name, _sizes
