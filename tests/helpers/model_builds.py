"""Building a model in one call and comparing weights, for the model tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedsim.config import ModelConfig
from fedsim.models import MODELS, build_model
from fedsim.models.architectures.text import TextModelConfig

#: the user's own class (`python`, model.target) is no architecture of fedsim's: its shape and options are the user's
USER_CODE = {"python"}
#: language models (fedsim.models.architectures.text) take token ids, not images: their own tests build them
TEXT = {name for name in MODELS.names() if MODELS.config(name) is TextModelConfig}
BUILT_IN = [  # `tv`: tv:<name>
    name for name in MODELS.names() if name not in MODELS.families and name not in USER_CODE and name not in TEXT
]


def build(name: str = "lenet", channels: int = 3, side: int = 32, classes: int = 10, seed: int = 0, **options):
    return build_model(ModelConfig(name=name, **options), channels, classes, side, seed)


def forward(model: nn.Module, channels: int, side: int) -> torch.Tensor:
    return model(torch.randn(2, channels, side, side))


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def one_line_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message
