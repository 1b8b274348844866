"""fc-invert: an image that alone activated a unit of a first fully-connected layer is dW_j / db_j, exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from fedsim.config import DataConfig, ModelConfig, parse_config
from fedsim.data import load_dataset
from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks
from fedsim.models import build_model

SIDE = 8
SHAPE = (1, SIDE, SIDE)
LR = 0.1
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    data = load_dataset(DataConfig(dataset="digits", image_size=SIDE), seed=0)
    return torch.from_numpy(data.x_train[:12]).double()


def exclusive_mlp(images: torch.Tensor, units_per_image: int = 3, shared_units: int = 4, seed: int = 0) -> nn.Module:
    """A ReLU MLP whose first layer has ``units_per_image`` units that exactly one image activates, for each
    image, and ``shared_units`` that every image activates (their update rows are mixtures)."""
    generator = torch.Generator().manual_seed(seed)
    flat = images.flatten(1)
    rows, biases = [], []
    for index in range(len(flat)):
        others = torch.cat([flat[:index], flat[index + 1 :]])
        for _ in range(units_per_image):
            direction = (
                flat[index]
                - others.mean(dim=0)
                + 0.05 * torch.randn(flat.shape[1], generator=generator, dtype=flat.dtype)
            )
            scores = flat @ direction
            assert scores[index] > torch.cat([scores[:index], scores[index + 1 :]]).max()
            rows.append(direction)
            biases.append(-(scores[index] + torch.cat([scores[:index], scores[index + 1 :]]).max()) / 2)
    for _ in range(shared_units):
        direction = torch.rand(flat.shape[1], generator=generator, dtype=flat.dtype)
        rows.append(direction)
        biases.append(-(flat @ direction).min() + 1.0)
    first = nn.Linear(flat.shape[1], len(rows)).double()
    with torch.no_grad():
        first.weight.copy_(torch.stack(rows))
        first.bias.copy_(torch.stack(biases))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), first, nn.ReLU(), nn.Linear(len(rows), 10).double())
    activated = (first(flat) > 0).sum(dim=0)
    assert activated.tolist() == [1] * (len(rows) - shared_units) + [len(flat)] * shared_units
    return model


def sgd_update(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, steps: int = 1, **sgd
) -> dict[str, torch.Tensor]:
    """The weights a client sends after ``steps`` full-batch SGD steps of its own (PyTorch's optimizer)."""
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=LR, **sgd)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(trained(images), labels).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in trained.state_dict().items()}


def view_of(model: nn.Module, observed: dict, num_samples: int, target: str = "client:0", **training) -> AttackerView:
    return AttackerView(
        round=1,
        tap="server",
        target=target,
        model=model,
        global_state={k: v.detach().clone() for k, v in model.state_dict().items()},
        observed_state=observed,
        input_shape=SHAPE,
        num_classes=10,
        num_samples=num_samples,
        local_training=LocalTraining(
            lr=LR, local_steps=training.pop("local_steps", 1), batch_size=num_samples, **training
        ),
        input_bounds=(torch.zeros(1), torch.ones(1)),
    )


def fc_invert(view: AttackerView, **options):
    (reconstruction,) = ATTACKS.get("fc-invert")([view], AttackOptions(name="fc-invert", **options), 0, CPU)
    return reconstruction


def worst_error(reconstructed: torch.Tensor, truth: torch.Tensor) -> float:
    """Largest, over the true images, distance (max abs pixel) to the nearest reconstruction."""
    differences = (reconstructed.double().flatten(1)[:, None] - truth.flatten(1)[None]).abs().amax(dim=2)
    return float(differences.min(dim=0).values.max())


def test_three_images_each_alone_on_some_units_come_back_exactly_with_their_labels(digits):
    images, labels = digits[:3], torch.tensor([2, 7, 4])
    model = exclusive_mlp(images)
    reconstruction = fc_invert(view_of(model, sgd_update(model, images, labels), 3))
    assert reconstruction.images.shape == (3, *SHAPE)
    assert worst_error(reconstruction.images, images) < 1e-6
    order = torch.cdist(images.flatten(1), reconstruction.images.double().flatten(1)).argmin(dim=1)
    assert reconstruction.labels[order].tolist() == labels.tolist()
    assert reconstruction.objective == 0  # every image confirmed by three identical ratios


def test_an_aggregate_of_two_clients_with_unequal_weights_is_still_exact(digits):
    images, labels = digits[:6], torch.tensor([0, 1, 2, 3, 4, 5])
    model = exclusive_mlp(images)
    first, second = sgd_update(model, images[:2], labels[:2]), sgd_update(model, images[2:], labels[2:])
    aggregate = {k: (2 * first[k] + 4 * second[k]) / 6 for k in first}  # FedAvg: shares 2/6 and 4/6
    reconstruction = fc_invert(view_of(model, aggregate, 6, target="aggregate"))
    assert worst_error(reconstruction.images, images) < 1e-6


def test_several_steps_with_momentum_and_weight_decay_stay_exact_when_the_training_is_known(digits):
    images, labels = digits[:3], torch.tensor([5, 6, 9])
    model = exclusive_mlp(images)
    sent = sgd_update(model, images, labels, steps=3, momentum=0.9, weight_decay=0.01)
    known = view_of(model, sent, 3, local_steps=3, momentum=0.9, weight_decay=0.01)
    assert worst_error(fc_invert(known).images, images) < 1e-6
    unaware = view_of(model, sent, 3, local_steps=3, momentum=0.9)  # the decay left in: no longer exact
    assert worst_error(fc_invert(unaware).images, images) > 1e-3


def test_images_two_units_confirm_go_before_stronger_mixture_rows(digits):
    images, labels = digits[:3], torch.tensor([2, 7, 4])
    model = exclusive_mlp(images, units_per_image=2, shared_units=8)  # mixtures outnumber the single images
    reconstruction = fc_invert(view_of(model, sgd_update(model, images, labels), 3))
    assert worst_error(reconstruction.images, images) < 1e-6


# ----------------------------------------------------------------------------------- requirements


def setting_of(model: nn.Module, name: str = "model", **facts) -> AttackSetting:
    return AttackSetting(model=model, model_name=name, input_shape=SHAPE, num_classes=10, **facts)


@pytest.mark.parametrize("attack", ["fc-invert", "cpa"])
def test_a_convolutional_model_is_refused_in_one_line_naming_its_first_layer(attack):
    lenet = build_model(ModelConfig(name="lenet"), 1, 10, SIDE, seed=0)
    reason = AttackOptions(name=attack).refusal(setting_of(lenet, "lenet"))
    assert reason is not None and "\n" not in reason
    assert "the first weighted layer of lenet is " in reason and "(Conv2d)" in reason
    if attack == "cpa":
        assert "no feature-inversion step is implemented" in reason


def test_first_layers_that_cannot_be_read_are_refused_with_the_reason():
    no_bias = nn.Sequential(nn.Flatten(), nn.Linear(64, 8, bias=False), nn.ReLU(), nn.Linear(8, 10))
    pooled = nn.Sequential(nn.AvgPool2d(2), nn.Flatten(), nn.Linear(16, 10))
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))
    refusal = AttackOptions(name="fc-invert").refusal
    assert (
        refusal(setting_of(no_bias))
        == "fc-invert reads each image's scale off the first layer's bias; '1' of model has no bias"
    )
    assert "'2' of model receives something computed from the images" in refusal(setting_of(pooled))
    assert refusal(setting_of(mlp, optimizer="adam")) == (
        "fc-invert needs updates that are sums of gradients; client.optimizer = 'adam' rescales every entry on its own "
        "(allowed: sgd)"
    )
    assert "adversary.knows.local_training: true" in refusal(
        setting_of(mlp, weight_decay=0.01, knows_local_training=False)
    )
    assert refusal(setting_of(mlp)) is None


def portfolio(model_name: str) -> list[str]:
    config = parse_config(
        {
            "data": {"dataset": "digits", "image_size": SIDE},
            "model": {"name": model_name},
            "adversary": {
                "tap": "server",
                "targets": "aggregate",
                "attacks": "strongest",
                "portfolio_exclude": ["ggssr"],
            },
        }
    )
    model = build_model(config.model, 1, 10, SIDE, seed=0)
    setting = attack_setting(config.adversary, config.client, config.model.name, False, model, SHAPE, 10)
    return [options.name for options in resolve_attacks(config.adversary, config.client.defenses, setting).attacks]


def test_strongest_runs_both_on_an_mlp_and_neither_on_conv_models():
    assert {"fc-invert", "cpa", "ig"} <= set(portfolio("mlp3"))
    for conv_model in ("lenet", "convnet"):
        names = portfolio(conv_model)
        assert "ig" in names and not {"fc-invert", "cpa"} & set(names), conv_model
