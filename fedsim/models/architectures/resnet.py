"""CIFAR-style ResNet-18 (He et al., CVPR 2016), as attacked in Inverting Gradients (Geiping et al. 2020).

Paper 002 attacks a ResNet-18 with the ImageNet stem (7x7 conv + max-pool); that one is `tv:resnet18`.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.layers import make_activation, make_dropout, make_norm2d
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig, Norm

#: BasicBlocks per stage; the first block of stages 2-4 halves the resolution.
RESNET18_BLOCKS = (2, 2, 2, 2)


def conv3x3(c_in: int, c_out: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=bias)


class BasicBlock(nn.Module):
    """Two 3x3 conv-norm layers with an identity (or 1x1 projection) shortcut, activation after the sum."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str, activation: str) -> None:
        super().__init__()
        bias = norm == "none"  # without a norm layer the convolutions need their own bias
        self.conv1 = conv3x3(c_in, c_out, stride, bias)
        self.norm1 = make_norm2d(norm, c_out)
        self.act1 = make_activation(activation)
        self.conv2 = conv3x3(c_out, c_out, 1, bias)
        self.norm2 = make_norm2d(norm, c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, kernel_size=1, stride=stride, bias=bias), make_norm2d(norm, c_out)
            )
        self.act2 = make_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.act2(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet with a CIFAR stem (He et al. 2016): 3x3 stride-1 conv, no max-pool, four BasicBlock stages.

    Written here rather than adapted from torchvision because torchvision's ResNet hard-codes ReLU,
    and gradient-inversion studies swap the activation (e.g. sigmoid or tanh, which are smooth).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        blocks: tuple[int, ...] = RESNET18_BLOCKS,
        width: int = 64,
        norm: str = "batch",
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, width, 1, bias=norm == "none")
        self.norm1 = make_norm2d(norm, width)
        self.act1 = make_activation(activation)
        stages: list[nn.Module] = []
        c_in = width
        for index, count in enumerate(blocks):
            c_out = width * 2**index
            stride = 1 if index == 0 else 2
            stage = [
                BasicBlock(c_in if i == 0 else c_out, c_out, stride if i == 0 else 1, norm, activation)
                for i in range(count)
            ]
            stages.append(nn.Sequential(*stage))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages  # torchvision's names
        self.avgpool = nn.AdaptiveAvgPool2d(1)  # any image size >= 1 px reaches the classifier
        self.dropout = make_dropout(dropout)
        self.fc = nn.Linear(c_in, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # As torchvision's ResNet: He-normal (fan_out) convolutions, norm layers at weight 1 / bias 0.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.norm1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


class ResNetConfig(LayeredModelConfig):
    name: Literal["resnet18"] = "resnet18"
    activation: Activation | None = Field(None, description="activation inside the blocks (null = relu)")
    width: int | None = Field(None, ge=1, description="channels of the first stage, doubled per stage (null = 64)")
    norm: Norm = Field("batch", description="normalisation after each convolution")


@MODELS.register(
    "resnet18",
    help="CIFAR-stem ResNet-18 (He et al. 2016, as in Inverting Gradients): 3x3 stem, no max-pool",
    config=ResNetConfig,
)
def build_resnet18(cfg: ResNetConfig, in_channels: int, num_classes: int, image_size: int) -> ResNet:
    return ResNet(
        in_channels,
        num_classes,
        RESNET18_BLOCKS,
        width=cfg.width or 64,
        norm=cfg.norm,
        activation=cfg.activation or "relu",
        dropout=cfg.dropout,
    )
