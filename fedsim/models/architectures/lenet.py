"""The LeNet variant of Deep Leakage from Gradients (Zhu, Liu & Han, NeurIPS 2019)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.layers import conv_out, make_activation, make_dropout
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig


def dlg_body(in_channels: int, width: int, activation: str) -> nn.Sequential:
    """DLG's three 5x5 convolutions (stride 2, 2, 1, padding 2), each followed by ``activation``."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, kernel_size=5, padding=2, stride=2),
        make_activation(activation),
        nn.Conv2d(width, width, kernel_size=5, padding=2, stride=2),
        make_activation(activation),
        nn.Conv2d(width, width, kernel_size=5, padding=2, stride=1),
        make_activation(activation),
    )


class LeNet(nn.Module):
    """DLG's LeNet (Zhu et al. 2019): three 5x5 convolutions (stride 2, 2, 1) and one linear layer.

    DLG uses sigmoid activations and no pooling because the attack needs a twice-differentiable
    model; at 32x32 the classifier sees 12 * 8 * 8 = 768 features, as in the paper's code.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        activation: str = "sigmoid",
        width: int = 12,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.body = dlg_body(in_channels, width, activation)
        # Two stride-2 convs with padding 2 give ceil(s / 4) per side, odd sizes included.
        side = conv_out(conv_out(image_size, 5, 2, 2), 5, 2, 2)
        self.dropout = make_dropout(dropout)
        self.fc = nn.Linear(width * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.flatten(self.body(x), 1)))


class LeNetConfig(LayeredModelConfig):
    name: Literal["lenet"] = "lenet"
    activation: Activation | None = Field(
        None, description="activation after each convolution (null = sigmoid, as in DLG)"
    )
    width: int | None = Field(None, ge=1, description="channels of each convolution (null = 12)")


@MODELS.register(
    "lenet", help="DLG LeNet (Zhu et al. 2019): 3 strided 5x5 convs + 1 linear, sigmoid by default", config=LeNetConfig
)
def build_lenet(cfg: LeNetConfig, in_channels: int, num_classes: int, image_size: int) -> LeNet:
    return LeNet(
        in_channels,
        num_classes,
        image_size,
        activation=cfg.activation or "sigmoid",
        width=cfg.width or 12,
        dropout=cfg.dropout,
    )
