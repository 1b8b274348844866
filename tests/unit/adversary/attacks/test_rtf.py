"""A malicious server: the imprint modification (Robbing the Fed) and its closed-form read-out."""

import torch
from torch import nn

from adversary.attacks.rtf import read_out
from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.modifications import MODIFICATIONS
from adversary.modifications.base import PublicData
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining

SHAPE = (1, 8, 8)
LR = 0.1


def agreed_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10))


def imprinted(bins: int, public: torch.Tensor, **options) -> nn.Module:
    config = MODIFICATIONS.config("imprint")(bins=bins, **options)
    return MODIFICATIONS.get("imprint")(config, agreed_model(), SHAPE, 10, PublicData(public, "test"), seed=0)


def one_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """A client's weights after one SGD step on its batch (what it sends)."""
    trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss = nn.functional.cross_entropy(model(images), labels)
    for (name, _), grad in zip(model.named_parameters(), torch.autograd.grad(loss, list(model.parameters()))):
        trained[name] = trained[name] - LR * grad
    return trained


def view_of(model: nn.Module, observed: dict, num_samples: int) -> AttackerView:
    return AttackerView(
        round=1,
        tap="server",
        target="aggregate",
        model=model,
        global_state={k: v.detach().clone() for k, v in model.state_dict().items()},
        observed_state=observed,
        input_shape=SHAPE,
        num_classes=10,
        num_samples=num_samples,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=num_samples),
    )


def public_images(count: int = 256) -> torch.Tensor:
    """Calibration images whose brightness spans [0, 1] evenly (as the server's public data would)."""
    generator = torch.Generator().manual_seed(9)
    return (
        torch.rand(count, 1, 1, 1, generator=generator) + 0.05 * torch.randn(count, *SHAPE, generator=generator)
    ).clamp(0, 1)


def distinct_brightness(count: int, seed: int = 0) -> torch.Tensor:
    """Images whose mean brightness is spread out: none share an imprint bin."""
    generator = torch.Generator().manual_seed(seed)
    levels = torch.linspace(0.15, 0.85, count)
    return (levels[:, None, None, None] + 0.1 * (torch.rand(count, *SHAPE, generator=generator) - 0.5)).clamp(0, 1)


def test_three_images_in_sixty_four_bins_come_back_exactly():
    public = public_images()
    model = imprinted(64, public)
    images = distinct_brightness(3)
    view = view_of(model, one_step(model, images, torch.tensor([0, 3, 7])), 3)
    recovered = read_out(view, threshold=1e-3)
    assert len(recovered) == 3
    errors = torch.cdist(recovered.flatten(1).double(), images.flatten(1).double()).min(dim=0).values
    assert errors.max() < 1e-4


def test_the_aggregate_of_several_clients_is_read_out_as_well():
    public = public_images()
    model = imprinted(128, public)
    images = distinct_brightness(6, seed=1)
    first, second = (
        one_step(model, images[:3], torch.tensor([1, 2, 3])),
        one_step(model, images[3:], torch.tensor([4, 5, 6])),
    )
    average = {k: 0.25 * first[k] + 0.75 * second[k] for k in first}  # FedAvg with unequal shares
    recovered = read_out(view_of(model, average, 6), threshold=1e-3)
    errors = torch.cdist(recovered.flatten(1).double(), images.flatten(1).double()).min(dim=0).values
    assert len(recovered) == 6 and errors.max() < 1e-4


def test_images_sharing_a_bin_come_back_as_one_blend():
    public = public_images()
    model = imprinted(8, public)
    images = torch.stack([torch.full(SHAPE, 0.5), torch.full(SHAPE, 0.5001), torch.full(SHAPE, 0.9)])
    recovered = read_out(view_of(model, one_step(model, images, torch.tensor([1, 2, 3])), 3), threshold=1e-3)
    assert len(recovered) == 2  # the two nearly equal images fell into one bin


def test_the_gaussian_calibration_needs_no_data():
    model = imprinted(16, torch.empty(0, *SHAPE), calibration="gaussian", mean=4.0, std=1.0)
    assert model.imprint.bias.shape == (16,)


def test_rtf_is_refused_without_a_malicious_server_in_one_line():
    setting = AttackSetting(model=agreed_model(), model_name="mlp", input_shape=SHAPE, num_classes=10)
    reason = AttackOptions(name="rtf").refusal(setting)
    assert reason == "rtf needs a malicious server (adversary.server: malicious); the server is honest"
    assert ATTACKS.config("rtf").threat_model == "malicious"
