"""DLG's LeNet with a fully connected representation layer before the classifier, the kind of model Soteria
defends (Sun et al., "Soteria: Provable Defense against Privacy Leakage in Federated Learning from
Representation Perspective", CVPR 2021).

Soteria perturbs the gradient of the fully connected layer that turns the convolutional features into the
data representation. On DLG's LeNet that layer is the classifier itself, which is not what the paper defends;
here it is ``representation`` (features -> ``hidden`` units), followed by the ``classifier`` (hidden -> classes).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from fedsim.models.architectures.lenet import dlg_body
from fedsim.models.layers import conv_out, make_activation, make_dropout
from fedsim.models.registry import MODELS, Activation, LayeredModelConfig

#: the module names Soteria and the reports refer to
REPRESENTATION_LAYER = "representation"
CLASSIFIER_LAYER = "classifier"


class LeNetFc(nn.Module):
    """DLG's three strided 5x5 convolutions, a fully connected representation layer and a linear classifier."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        activation: str = "tanh",
        width: int = 12,
        hidden: int = 100,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.body = dlg_body(in_channels, width, activation)
        side = conv_out(conv_out(image_size, 5, 2, 2), 5, 2, 2)
        self.representation = nn.Linear(width * side * side, hidden)
        self.activation = make_activation(activation)
        self.dropout = make_dropout(dropout)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.flatten(self.body(x), 1)
        return self.classifier(self.dropout(self.activation(self.representation(features))))


class LeNetFcConfig(LayeredModelConfig):
    name: Literal["lenet-fc"] = "lenet-fc"
    activation: Activation | None = Field(None, description="activation after each layer but the last (null = tanh)")
    width: int | None = Field(None, ge=1, description="channels of each convolution (null = 12)")
    hidden: int = Field(100, ge=1, description="units of the fully connected representation layer")


@MODELS.register(
    "lenet-fc",
    help="DLG LeNet with a fully connected representation layer before the classifier (Soteria's kind of model)",
    config=LeNetFcConfig,
)
def build_lenet_fc(cfg: LeNetFcConfig, in_channels: int, num_classes: int, image_size: int) -> LeNetFc:
    return LeNetFc(
        in_channels,
        num_classes,
        image_size,
        activation=cfg.activation or "tanh",
        width=cfg.width or 12,
        hidden=cfg.hidden,
        dropout=cfg.dropout,
    )
