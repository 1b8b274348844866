"""The default attacked CNN of the GGSS-R paper (paper 002: gradient-guided conditional diffusion)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.layers import make_activation, make_dropout
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig, ModelError


class SimpleCNN(nn.Module):
    """Paper 002's CNN: two 3x3 conv (64, 128 channels) + 2x2 max-pool stages, a 256-unit hidden layer.

    ``width`` scales the convolution channels (width, 2 * width); the hidden layer stays at 256 units
    as in the paper. The paper's softmax output is left to the loss (cross-entropy takes logits).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        activation: str = "relu",
        width: int = 64,
        dropout: float = 0.0,
        hidden: int = 256,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1),
            make_activation(activation),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            make_activation(activation),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.hidden = nn.Sequential(nn.Linear(2 * width * side * side, hidden), make_activation(activation))
        self.dropout = make_dropout(dropout)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.hidden(torch.flatten(self.features(x), 1))
        return self.classifier(self.dropout(x))


class CnnConfig(LayeredModelConfig):
    name: Literal["cnn"] = "cnn"
    activation: Activation | None = Field(None, description="hidden activation (null = relu)")
    width: int | None = Field(
        None, ge=1, description="channels of the first convolution, the second has twice (null = 64)"
    )


@MODELS.register(
    "cnn",
    help="the GGSS-R paper's default CNN (Enhanced Privacy Leakage from Noise-Perturbed Gradients): "
    "conv64-pool-conv128-pool-fc256, relu by default",
    config=CnnConfig,
)
def build_cnn(cfg: CnnConfig, in_channels: int, num_classes: int, image_size: int) -> SimpleCNN:
    if image_size < 4:  # two 2x2 max-pools would leave no pixel
        raise ModelError(f"model.name = 'cnn': needs images of at least 4 px, got {image_size}")
    return SimpleCNN(
        in_channels,
        num_classes,
        image_size,
        activation=cfg.activation or "relu",
        width=cfg.width or 64,
        dropout=cfg.dropout,
    )
