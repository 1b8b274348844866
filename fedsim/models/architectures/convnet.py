"""The "ConvNet" of Inverting Gradients (Geiping et al., NeurIPS 2020), as shipped in `breaching`."""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.layers import make_activation, make_dropout, make_norm2d
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig, Norm

#: (input, output) channels of conv0..conv7 in multiples of width; a 3x3 max-pool follows conv5 and conv7.
CONV_CHANNELS: tuple[tuple[int, int], ...] = ((0, 1), (1, 2), (2, 2), (2, 4), (4, 4), (4, 4), (4, 4), (4, 4))
POOL_AFTER = (5, 7)
POOL_KERNEL = 3
POOLED_SIDE = 3


class ConvNet(nn.Module):
    """Inverting Gradients' ConvNet (Geiping et al. 2020): eight conv-norm-act blocks, two 3x3 max-pools, one linear.

    Some copies of breaching's ``ConvNet`` list ``conv6`` twice in an OrderedDict, which keeps only one,
    so the network that actually runs has eight convolutions (conv0-conv7), as reproduced here. Two
    additions keep it usable
    beyond 32 px: a pool is skipped when the map is already smaller than its 3x3 window, and an adaptive
    average pool brings the map to 3x3 before the linear layer. At 32 px both are no-ops
    (32 -> 10 -> 3), so the network equals the original there.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        activation: str = "relu",
        norm: str = "batch",
        width: int = 64,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        side = image_size
        for index, (c_in, c_out) in enumerate(CONV_CHANNELS):
            source = in_channels if c_in == 0 else c_in * width
            layers[f"conv{index}"] = nn.Conv2d(source, c_out * width, kernel_size=3, padding=1)
            layers[f"norm{index}"] = make_norm2d(norm, c_out * width)
            layers[f"act{index}"] = make_activation(activation)
            if index in POOL_AFTER:
                pool = POOL_AFTER.index(index)
                # The image size is known here, so a pool that would fail on a tiny map is left out.
                layers[f"pool{pool}"] = nn.MaxPool2d(POOL_KERNEL) if side >= POOL_KERNEL else nn.Identity()
                side = side // POOL_KERNEL if side >= POOL_KERNEL else side
        self.features = nn.Sequential(layers)  # keys conv0, norm0, act0, ... not 0, 1, 2
        self.pool = nn.AdaptiveAvgPool2d(POOLED_SIDE)
        self.dropout = make_dropout(dropout)
        self.linear = nn.Linear(4 * width * POOLED_SIDE * POOLED_SIDE, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.pool(self.features(x)), 1)
        return self.linear(self.dropout(x))


class ConvNetConfig(LayeredModelConfig):
    name: Literal["convnet"] = "convnet"
    activation: Activation | None = Field(None, description="activation after each convolution (null = relu)")
    width: int | None = Field(None, ge=1, description="channel multiplier: convolutions have 1-4 times it (null = 64)")
    norm: Norm = Field("batch", description="normalisation after each convolution")


@MODELS.register(
    "convnet",
    help="Inverting Gradients ConvNet (Geiping et al. 2020, breaching): 8 conv-norm-act, width 64",
    config=ConvNetConfig,
)
def build_convnet(cfg: ConvNetConfig, in_channels: int, num_classes: int, image_size: int) -> ConvNet:
    return ConvNet(
        in_channels,
        num_classes,
        image_size,
        activation=cfg.activation or "relu",
        norm=cfg.norm,
        width=cfg.width or 64,
        dropout=cfg.dropout,
    )
