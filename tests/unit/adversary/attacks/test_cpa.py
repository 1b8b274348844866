"""cpa: the Cocktail Party Attack separates the images mixed in a first fully-connected layer's update."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from fedsim.config import DataConfig
from fedsim.data import load_dataset
from fedsim.judge.scoring import score_reconstruction

SIDE = 16
SHAPE = (1, SIDE, SIDE)
LR = 0.1
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def faces() -> torch.Tensor:
    """scikit-image's LFW crops (25 x 25 grey faces in [0, 1])."""
    data = load_dataset(DataConfig(dataset="lfw-faces"), seed=0)
    return torch.from_numpy(data.x_train)


def sparse_images(count: int, seed: int = 0) -> torch.Tensor:
    """Independent images of scattered bright pixels: ICA's textbook case (independent, far from Gaussian)."""
    generator = torch.Generator().manual_seed(seed)
    spikes = torch.rand(count, *SHAPE, generator=generator) < 0.15
    return spikes * (0.3 + 0.7 * torch.rand(count, *SHAPE, generator=generator))


def wide_mlp(pixels: int, units: int = 512, seed: int = 0) -> nn.Module:
    """A ReLU MLP with a wide, randomly initialised first layer (PyTorch's default init)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(pixels, units), nn.ReLU(), nn.Linear(units, 10))


def aggregate_view(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, clients: int) -> AttackerView:
    """The FedAvg aggregate of ``clients`` equal clients, each one SGD step on its share of the images."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sent = []
    for part in range(clients):
        client = copy.deepcopy(model)
        batch = slice(part * len(images) // clients, (part + 1) * len(images) // clients)
        loss = nn.functional.cross_entropy(client(images[batch]), labels[batch])
        grads = torch.autograd.grad(loss, list(client.parameters()))
        sent.append({name: state[name] - LR * grad for (name, _), grad in zip(client.named_parameters(), grads)})
    observed = {name: sum(s[name] for s in sent) / clients for name in state}
    return AttackerView(
        round=1,
        tap="server",
        target="aggregate",
        model=model,
        global_state=state,
        observed_state=observed,
        input_shape=tuple(images.shape[1:]),
        num_classes=10,
        num_samples=len(images),
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=len(images)),
        input_bounds=(torch.zeros(1), torch.ones(1)),
    )


def cpa(view: AttackerView, seed: int = 0, **options):
    (reconstruction,) = ATTACKS.get("cpa")([view], AttackOptions(name="cpa", **options), seed, CPU)
    return reconstruction


def test_independent_images_of_an_aggregate_come_back_exactly():
    images, labels = sparse_images(8), torch.arange(8)
    reconstruction = cpa(aggregate_view(wide_mlp(SIDE * SIDE), images, labels, clients=2))
    score = score_reconstruction(reconstruction, images, labels, lambda t: t)
    assert min(score.psnr) > 60  # every image, after the scorer's minimum-MSE pairing
    assert score.label_accuracy == 1.0


def test_four_faces_of_an_aggregate_are_separated_at_high_psnr(faces):
    images, labels = faces[100:104], torch.tensor([3, 1, 4, 1])
    reconstruction = cpa(aggregate_view(wide_mlp(25 * 25), images, labels, clients=2))
    score = score_reconstruction(reconstruction, images, labels, lambda t: t)
    assert min(score.psnr) > 25 and min(score.ssim) > 0.9
    assert score.label_accuracy == 1.0
    unmatched = score_reconstruction(reconstruction, images.flip(-1).flip(-2), labels, lambda t: t)
    assert score.psnr_mean > unmatched.psnr_mean + 10  # these faces, not an average face


def test_the_separation_is_seeded():
    images = sparse_images(6, seed=1)
    view = aggregate_view(wide_mlp(SIDE * SIDE), images, torch.arange(6), clients=1)
    assert torch.equal(cpa(view, seed=3).images, cpa(view, seed=3).images)
