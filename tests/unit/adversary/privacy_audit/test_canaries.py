"""Canaries: drawn from the seed alone, inserted as one more example of a step, before DP-SGD's noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from adversary.privacy_audit.canaries import CanaryClients, CanaryExamples, DiracCanaries, inclusion
from clients.training import train_locally
from tests.helpers.dp_training import IDS, client, dpsgd, toy

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def test_a_plan_is_the_seeds_and_includes_about_half():
    first, again = DiracCanaries.draw(500, 10_000, 1.0, seed=3), DiracCanaries.draw(500, 10_000, 1.0, seed=3)
    assert np.array_equal(first.coordinates, again.coordinates) and np.array_equal(first.included, again.included)
    assert len(set(first.coordinates.tolist())) == 500  # one coordinate per canary
    assert 200 < first.included.sum() < 300
    assert not np.array_equal(inclusion(500, 3), inclusion(500, 4))


def test_more_canaries_than_parameters_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"audit.canaries = 20: .* which has 17"):
        DiracCanaries.draw(20, 17, 1.0, seed=0)


def test_every_included_canary_joins_a_step_at_the_sampling_rate_and_others_never():
    canaries = DiracCanaries.draw(100, 1000, 2.0, seed=1)
    parameters = [torch.zeros(10, 50), torch.zeros(500)]
    inserter = canaries.inserter(sample_rate=0.3, seed=7)
    joined = np.zeros(1000)
    for _ in range(200):
        step = inserter.step_gradients(parameters)
        if step is not None:
            joined += torch.cat([g.reshape(-1) for g in step]).numpy() / 2.0
    assert not joined[canaries.coordinates[~canaries.included]].any()
    rates = joined[canaries.coordinates[canaries.included]] / 200
    assert abs(rates.mean() - 0.3) < 0.02
    assert joined.sum() == inserter.inserted


class EveryStep:
    """A canary that joins every step at coordinate 0 (the first weight), with gradient ``norm``."""

    def __init__(self, norm: float) -> None:
        self.norm = norm

    def step_gradients(self, parameters):
        gradients = [torch.zeros_like(parameter) for parameter in parameters]
        gradients[0].view(-1)[0] = self.norm
        return gradients


@pytest.mark.parametrize(
    "defenses", [[], [dpsgd(noise_multiplier=0.0, max_grad_norm=1.0)]], ids=["plain", "dpsgd-without-noise"]
)
def test_a_canary_moves_its_weight_as_one_more_example_of_the_batch(defenses):
    moved = []
    for canaries in (None, EveryStep(1.0)):
        model, x, y = toy()
        before = model[1].weight.detach().clone()
        cfg = client(*defenses, lr=0.5, batch_size=10, local_steps=1)
        train_locally(model, x, y, IDS, cfg, seed=0, canaries=canaries)
        moved.append(model[1].weight.detach() - before)
    difference = moved[0] - moved[1]  # gradient descent: the canary pushes its weight down
    # one step of lr * norm / batch size at the canary's coordinate, nothing anywhere else
    assert difference.view(-1)[0].item() == pytest.approx(0.5 * 1.0 / 10, rel=1e-5)
    assert torch.allclose(difference.view(-1)[1:], torch.zeros(difference.numel() - 1), atol=1e-6)


def test_dpsgd_noise_covers_the_canary():
    """With noise, one run's canary coordinate moves by the canary plus noise of std z C / B per step."""
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=5.0), lr=1.0, batch_size=10, local_steps=1)
    before = model[1].weight.detach().clone()
    train_locally(model, x, y, IDS, cfg, seed=0, canaries=EveryStep(1.0))
    moved = (before - model[1].weight.detach()).view(-1)
    assert moved[1:].abs().max() > 0.2  # noise of std 0.5 on every weight, not only the canary's


def test_canary_examples_are_mislabelled_test_images():
    images, labels = torch.randn(50, 1, 4, 4), torch.arange(50) % 10
    canaries = CanaryExamples.draw(images, labels, 20, 10, seed=0)
    assert len(canaries.x) == 20
    originals = {tuple(image.flatten().tolist()): int(label) for image, label in zip(images, labels, strict=True)}
    assert all(originals[tuple(x.flatten().tolist())] != int(y) for x, y in zip(canaries.x, canaries.y, strict=True))
    x, y = canaries.inserted()
    assert len(x) == len(y) == canaries.included.sum()


def test_canary_clients_have_unit_directions_and_send_their_sum():
    canaries = CanaryClients.draw(10, 300, 2.0, seed=0)
    blocks = torch.cat([block for _, block in canaries.directions(chunk=4)])
    assert torch.allclose(blocks.norm(dim=1), torch.ones(10, dtype=torch.float64))
    expected = 2.0 * blocks[torch.from_numpy(canaries.included)].sum(dim=0)
    assert torch.allclose(canaries.inserted_sum(), expected)
    cosines = canaries.cosines(blocks[3] * 7.0)
    assert cosines[3] == pytest.approx(1.0) and np.abs(np.delete(cosines, 3)).max() < 0.3


def test_model_with_frozen_parameters_counts_only_trainable_ones():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    model[0].weight.requires_grad_(False)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 8
