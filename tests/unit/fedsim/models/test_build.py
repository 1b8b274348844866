"""Building the built-in models: forward passes at odd sizes, activation, norm, width, dropout, init, seeds."""

from __future__ import annotations

import pytest
from model_builds import BUILT_IN, build, forward, same_weights, state
from torch import nn

from fedsim.models import count_parameters

SHAPES = [(1, 16), (3, 32)]  # (channels, side): MNIST-like and CIFAR-like, kept small for speed


def module_types(model: nn.Module) -> set[type[nn.Module]]:
    return {type(module) for module in model.modules()}


# ------------------------------------------------------------------------------------------ forward


@pytest.mark.parametrize("channels,side", SHAPES)
@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_models_forward(name: str, channels: int, side: int) -> None:
    model = build(name, channels, side, classes=7)
    assert forward(model, channels, side).shape == (2, 7)


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_models_accept_odd_and_tiny_images(name: str) -> None:
    model = build(name, 1, 7, classes=3)
    assert forward(model, 1, 7).shape == (2, 3)


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


def test_lenet_fc_has_a_representation_layer_before_its_classifier() -> None:
    model = build("lenet-fc", 1, 28, classes=10, hidden=32)
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    assert linears == ["representation", "classifier"]
    assert model.representation.in_features == 12 * 7 * 7 and model.representation.out_features == 32
    assert model.classifier.in_features == 32 and model.classifier.out_features == 10
    assert nn.Tanh in module_types(model) and nn.ReLU not in module_types(model)  # twice differentiable by default
