"""The model registry: the paper models, names checked with suggestions, each model's config keys."""

from __future__ import annotations

import pytest
from model_builds import BUILT_IN, one_line_error

from fedsim.config import ConfigError, ModelConfig, parse_config
from fedsim.models import MODELS, check_model_name


def test_registry_holds_the_paper_models() -> None:
    assert set(BUILT_IN) == {"lenet", "lenet-fc", "cnn", "mlp3", "mlp4", "mlp5", "convnet", "resnet18"}
    assert MODELS.families == {"tv": "torchvision classifier"} and MODELS.label("tv") == "tv:<name>"
    assert all(MODELS.describe().values())  # every model has a one-line help


def test_each_model_takes_the_keys_it_uses() -> None:
    assert type(ModelConfig(name="mlp4")).__name__ == "MlpConfig" and ModelConfig(name="mlp4").name == "mlp4"
    assert parse_config({"model": {"name": "resnet18", "norm": "group"}}).model.norm == "group"
    with pytest.raises(ConfigError) as excinfo:
        parse_config({"model": {"name": "lenet", "norm": "group"}})
    assert one_line_error(excinfo) == (
        "unknown key 'model.norm' for model 'lenet'; allowed here: name, init, checkpoint, activation, width, dropout"
    )
    with pytest.raises(ConfigError, match=r"^model.name = 'tv': 'tv' is not a torchvision model name; use tv:<name>"):
        parse_config({"model": {"name": "tv"}})


def test_check_model_name_accepts_built_in_and_torchvision_names() -> None:
    for name in [*BUILT_IN, "tv:resnet18", "tv:vgg16", "tv:mobilenet_v2"]:
        check_model_name(name)


def test_typo_suggests_the_close_name() -> None:
    with pytest.raises(ValueError) as excinfo:
        check_model_name("lennet")
    message = one_line_error(excinfo)
    assert "did you mean 'lenet'" in message and "resnet18" in message and "tv:" in message


def test_config_rejects_unknown_model_names() -> None:
    with pytest.raises(ValueError, match="did you mean 'lenet'"):
        ModelConfig(name="lennet")
