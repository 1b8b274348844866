"""fedsim.models: every model runs, options are honoured, and failures are one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from fedsim.config import ConfigError, ModelConfig, parse_config
from fedsim.models import MODELS, ModelError, build_model, check_model_name, count_parameters
from fedsim.models.torchvision_adapter import pretrained_weights_path

BUILT_IN = [name for name in MODELS.names() if name not in MODELS.families]  # `tv` stands for tv:<name>
SHAPES = [(1, 16), (3, 32)]  # (channels, side): MNIST-like and CIFAR-like, kept small for speed


def build(name: str = "lenet", channels: int = 3, side: int = 32, classes: int = 10, seed: int = 0, **options):
    return build_model(ModelConfig(name=name, **options), channels, classes, side, seed)


def forward(model: nn.Module, channels: int, side: int) -> torch.Tensor:
    return model(torch.randn(2, channels, side, side))


def module_types(model: nn.Module) -> set[type[nn.Module]]:
    return {type(module) for module in model.modules()}


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def one_line_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------------------------------ forward


def test_registry_holds_the_paper_models() -> None:
    assert set(BUILT_IN) == {"lenet", "cnn", "mlp3", "mlp4", "mlp5", "convnet", "resnet18"}
    assert MODELS.families == {"tv": "torchvision classifier"} and MODELS.label("tv") == "tv:<name>"
    assert all(MODELS.describe().values())  # every model has a one-line help


@pytest.mark.parametrize("channels,side", SHAPES)
@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_models_forward(name: str, channels: int, side: int) -> None:
    model = build(name, channels, side, classes=7)
    assert forward(model, channels, side).shape == (2, 7)


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_models_accept_odd_and_tiny_images(name: str) -> None:
    model = build(name, 1, 7, classes=3)
    assert forward(model, 1, 7).shape == (2, 3)


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


# ------------------------------------------------------------------------------------------ options


def test_lenet_is_dlgs_lenet() -> None:
    model = build("lenet", 3, 32, classes=10)
    assert nn.Sigmoid in module_types(model) and nn.ReLU not in module_types(model)
    assert model.fc.in_features == 768  # 12 * 8 * 8, as in DLG's code
    assert count_parameters(model) == (3 * 12 * 25 + 12) + 2 * (12 * 12 * 25 + 12) + (768 * 10 + 10)


def test_activation_override_is_honoured() -> None:
    model = build("lenet", activation="relu")
    assert nn.ReLU in module_types(model) and nn.Sigmoid not in module_types(model)


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_model_takes_the_configured_activation(name: str) -> None:
    types = module_types(build(name, 1, 16, activation="tanh"))
    assert nn.Tanh in types and not types & {nn.ReLU, nn.Sigmoid}


@pytest.mark.parametrize("name", ["resnet18", "convnet"])
def test_norm_choice(name: str) -> None:
    group = module_types(build(name, 3, 16, norm="group"))
    assert nn.GroupNorm in group and nn.BatchNorm2d not in group
    assert not module_types(build(name, 3, 16, norm="none")) & {nn.GroupNorm, nn.BatchNorm2d}
    assert nn.BatchNorm2d in module_types(build(name, 3, 16))


def test_group_norm_groups_divide_the_channels() -> None:
    model = build("convnet", 3, 16, norm="group", width=6)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and all(m.num_channels % m.num_groups == 0 for m in norms)


def test_width_scales_the_model() -> None:
    assert count_parameters(build("resnet18", width=8)) < count_parameters(build("resnet18"))
    assert build("cnn", width=16).features[0].out_channels == 16
    assert build("mlp3", width=256).classifier.in_features == 64  # 512-128 scaled to 256-64


@pytest.mark.parametrize("name", BUILT_IN)
def test_dropout_adds_a_dropout_layer_without_changing_the_weights_layout(name: str) -> None:
    plain, dropped = build(name, 1, 16), build(name, 1, 16, dropout=0.3)
    assert nn.Dropout not in module_types(plain)
    assert any(isinstance(m, nn.Dropout) and m.p == 0.3 for m in dropped.modules())
    assert plain.state_dict().keys() == dropped.state_dict().keys()  # checkpoints fit either way


# --------------------------------------------------------------------------------------------- init


@pytest.mark.parametrize("name", ["lenet", "resnet18"])
def test_uniform_init_is_dlgs(name: str) -> None:
    default, uniform = build(name, 3, 16), build(name, 3, 16, init="uniform")
    assert all(p.abs().max() <= 0.5 for p in uniform.parameters())
    assert max(p.abs().max() for p in uniform.parameters()) > 0.45  # really spread over the interval
    assert not same_weights(state(default), state(uniform))


@pytest.mark.parametrize("name", ["lenet", "convnet", "tv:resnet18"])
def test_seed_determines_the_initial_weights(name: str) -> None:
    assert same_weights(state(build(name, 3, 16, seed=1)), state(build(name, 3, 16, seed=1)))
    assert not same_weights(state(build(name, 3, 16, seed=1)), state(build(name, 3, 16, seed=2)))


# ------------------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    saved = state(build("convnet", 3, 16, seed=3))
    torch.save(saved, tmp_path / "plain.pt")
    torch.save({"model": saved, "round": 4}, tmp_path / "wrapped.pt")
    for file in ("plain.pt", "wrapped.pt"):
        loaded = build("convnet", 3, 16, seed=4, checkpoint=tmp_path / file)
        assert same_weights(state(loaded), saved)


def test_checkpoint_wins_over_uniform_init(tmp_path: Path) -> None:
    saved = state(build("lenet", seed=5))
    torch.save({"state_dict": saved}, tmp_path / "ckpt.pt")
    assert same_weights(state(build("lenet", init="uniform", checkpoint=tmp_path / "ckpt.pt")), saved)


def test_checkpoint_with_wrong_shapes_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "ten_classes.pt"
    torch.save(build("lenet", classes=10).state_dict(), file)
    with pytest.raises(ModelError) as excinfo:
        build("lenet", classes=5, checkpoint=file)
    message = one_line_error(excinfo)
    assert message.startswith(f"model.checkpoint = '{file}'")
    assert "'fc.weight'" in message and "[10, 768]" in message and "[5, 768]" in message


def test_checkpoint_of_another_model_names_the_first_key(tmp_path: Path) -> None:
    file = tmp_path / "cnn.pt"
    torch.save(build("cnn").state_dict(), file)
    with pytest.raises(ModelError, match=r"key 'body\.0\.weight' is missing"):
        build("lenet", checkpoint=file)


def test_missing_or_unreadable_checkpoint(tmp_path: Path) -> None:
    from fedsim.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"^model.checkpoint = '.*absent.pt': no such file$"):
        parse_config({"model": {"name": "lenet", "checkpoint": str(tmp_path / "absent.pt")}})
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError) as excinfo:
        build("lenet", checkpoint=tmp_path / "junk.pt")
    assert "cannot be read" in one_line_error(excinfo)


# -------------------------------------------------------------------------------------- pretrained


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
        "unknown key 'model.pretrained' for model 'lenet'; allowed here: name, init, checkpoint, activation, width, dropout"
    )
    with pytest.raises(ConfigError, match=r"^model.init = 'uniform': would overwrite the pretrained weights"):
        parse_config({"model": {"name": "tv:resnet18", "pretrained": True, "init": "uniform"}})


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


# ------------------------------------------------------------------------------------------- names


def test_check_model_name_accepts_built_in_and_torchvision_names() -> None:
    for name in [*BUILT_IN, "tv:resnet18", "tv:vgg16", "tv:mobilenet_v2"]:
        check_model_name(name)


def test_typo_suggests_the_close_name() -> None:
    with pytest.raises(ValueError) as excinfo:
        check_model_name("lennet")
    message = one_line_error(excinfo)
    assert "did you mean 'lenet'" in message and "resnet18" in message and "tv:" in message


def test_unknown_torchvision_name_fails_with_suggestions() -> None:
    with pytest.raises(ValueError) as excinfo:
        check_model_name("tv:resnet19")
    assert "'tv:resnet18'" in one_line_error(excinfo)
    with pytest.raises(ValueError):
        check_model_name("tv:fasterrcnn_resnet50_fpn")  # detection, not a classifier


def test_config_rejects_unknown_model_names() -> None:
    with pytest.raises(ValueError, match="did you mean 'lenet'"):
        ModelConfig(name="lennet")
