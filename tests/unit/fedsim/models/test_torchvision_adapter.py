"""torchvision models as `tv:<name>`: small images, options they cannot honour, cached pretrained weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from model_builds import build, forward, one_line_error
from torch import nn

from fedsim.config import ConfigError, parse_config
from fedsim.models import ModelError, check_model_name
from fedsim.models.architectures.torchvision_adapter import pretrained_weights_path


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("name", ["tv:resnet18", "tv:mobilenet_v2"])
def test_torchvision_models_forward_on_small_images(name: str, channels: int) -> None:
    model = build(name, channels, 32, classes=10)
    assert forward(model, channels, 32).shape == (2, 10)
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.in_channels == channels


def test_vgg16_works_at_32_px_or_says_why() -> None:
    try:
        model = build("tv:vgg16", 3, 32, classes=10)
    except ModelError as error:
        assert "needs images of at least" in str(error) and "\n" not in str(error)
    else:
        assert forward(model, 3, 32).shape == (2, 10)


def test_too_small_images_give_the_smallest_working_size() -> None:
    with pytest.raises(ModelError) as excinfo:
        build("tv:alexnet", 3, 32)
    assert one_line_error(excinfo) == "model.name = 'tv:alexnet': needs images of at least 63 px, got 32"


def test_vit_is_built_for_the_data_set_size() -> None:
    assert forward(build("tv:vit_b_16", 3, 32, classes=4), 3, 32).shape == (2, 4)
    with pytest.raises(ModelError, match="cannot be built for 30 px images"):
        build("tv:vit_b_16", 3, 30)


def test_torchvision_models_reject_options_they_cannot_honour() -> None:
    # torchvision architectures are taken as they are: their config has no activation, width, norm or dropout
    for key, value in (("activation", "sigmoid"), ("dropout", 0.5), ("width", 8), ("norm", "group")):
        with pytest.raises(ConfigError) as excinfo:
            parse_config({"model": {"name": "tv:resnet18", key: value}})
        assert one_line_error(excinfo) == (
            f"unknown key 'model.{key}' for model 'tv:resnet18'; allowed here: name, init, checkpoint, pretrained"
        )


def test_pretrained_without_cached_weights_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    with pytest.raises(ModelError) as excinfo:
        build("tv:resnet18", pretrained=True)
    message = one_line_error(excinfo)
    assert "resnet18-f37072fd.pth" in message and str(tmp_path / "checkpoints") in message


def test_pretrained_loads_the_cached_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    torch.manual_seed(123)
    imagenet = torchvision.models.resnet18()  # stands in for the real download
    _, file = pretrained_weights_path("resnet18")
    file.parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), file)

    model = build("tv:resnet18", 1, 32, classes=10, pretrained=True)
    assert torch.equal(model.layer1[0].conv1.weight, imagenet.layer1[0].conv1.weight)
    # one grey channel gets the sum of the RGB filters; the 1000-class head becomes a 10-class one
    assert torch.allclose(model.conv1.weight, imagenet.conv1.weight.sum(dim=1, keepdim=True))
    assert model.fc.out_features == 10
    assert forward(model, 1, 32).shape == (2, 10)


@pytest.mark.parametrize("name,channels", [("tv:googlenet", 1), ("tv:squeezenet1_1", 3)])
def test_pretrained_state_fits_the_weightless_copy(
    name: str, channels: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clients and the evaluator build `pretrained: false` copies and load the server's state into them.
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    tv_name = name.removeprefix("tv:")
    extra = {"aux_logits": True, "init_weights": False} if tv_name == "googlenet" else {}
    _, file = pretrained_weights_path(tv_name)
    file.parent.mkdir(parents=True)
    torch.save(torchvision.models.get_model(tv_name, **extra).state_dict(), file)

    pretrained = build(name, channels, 32, classes=5, pretrained=True).eval()
    copy = build(name, channels, 32, classes=5, seed=9).eval()
    copy.load_state_dict(pretrained.state_dict())  # strict
    x = torch.randn(2, channels, 32, 32)
    assert torch.allclose(pretrained(x), copy(x))


def test_pretrained_is_only_for_torchvision_models() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_config({"model": {"name": "lenet", "pretrained": True}})
    assert one_line_error(excinfo) == (
        "unknown key 'model.pretrained' for model 'lenet'; "
        "allowed here: name, init, checkpoint, activation, width, dropout"
    )
    with pytest.raises(ConfigError, match=r"^model.init = 'uniform': would overwrite the pretrained weights"):
        parse_config({"model": {"name": "tv:resnet18", "pretrained": True, "init": "uniform"}})


def test_unknown_torchvision_name_fails_with_suggestions() -> None:
    with pytest.raises(ValueError) as excinfo:
        check_model_name("tv:resnet19")
    assert "'tv:resnet18'" in one_line_error(excinfo)
    with pytest.raises(ValueError):
        check_model_name("tv:fasterrcnn_resnet50_fpn")  # detection, not a classifier
