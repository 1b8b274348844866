"""A new model is one new file in fedsim/models/architectures/: the package finds it and it registers."""

import torch

from fedsim.models import MODELS, ModelConfig, build_model, check_model_name
from tests.helpers.discovery import package_with_new_module

LINEAR = '''
"""``linear``: one linear layer on the flattened image (multinomial logistic regression)."""

from pydantic import Field
from torch import nn

from fedsim.models.registry import MODELS, ModelConfig


class LinearConfig(ModelConfig):
    bias: bool = Field(True, description="give the layer a bias")


@MODELS.register("linear", help="one linear layer on the flattened image", config=LinearConfig)
def build_linear(cfg: LinearConfig, in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size * image_size, num_classes, bias=cfg.bias))
'''


def test_a_new_file_in_the_architectures_package_registers_its_model(tmp_path):
    assert "linear" not in MODELS
    with package_with_new_module(
        "fedsim.models.architectures", "linear", LINEAR, tmp_path / "architectures", MODELS, "linear"
    ):
        check_model_name("linear")
        config = MODELS.config("linear")(name="linear", bias=False)
        model = build_model(config, in_channels=1, num_classes=10, image_size=8, seed=0)
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
        assert sum(p.numel() for p in model.parameters()) == 64 * 10
    assert "linear" not in MODELS
    assert ModelConfig().name == "lenet"
