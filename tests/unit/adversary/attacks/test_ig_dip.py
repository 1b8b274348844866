"""ig-dip: Inverting Gradients through an untrained generator (paper 001's deep image prior)."""

from __future__ import annotations

import pytest
import torch

from adversary.attacks.ig_dip import DipParametrization
from adversary.inversion import AttackOptions, run_attack

CPU = torch.device("cpu")


def digit_view():
    from linear_views import linear_view

    from fedsim.config import DataConfig
    from fedsim.data import load_dataset

    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    x, y = torch.from_numpy(data.x_train[:1]), torch.from_numpy(data.y_train[:1])
    return x, linear_view(x, y)


def test_the_generator_can_represent_a_digit_within_the_bounds():
    x, _ = digit_view()
    bounds = (torch.zeros(1), torch.ones(1))
    dip = DipParametrization(AttackOptions(name="ig-dip"), tuple(x.shape), bounds, [7], CPU, torch.float32)
    w = dip.w0.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([w], lr=0.01)
    for _ in range(60):
        loss = ((dip.images(w)[0] - x) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    images = dip.images(w.detach())
    assert images.min() >= 0 and images.max() <= 1
    assert (
        float(10 * torch.log10(1 / ((images[0] - x) ** 2).mean())) > 25
    )  # measured: 32 dB after 60 steps, 48 dB after 200


def test_rows_are_independent_generators_from_their_own_seeds():
    x, _ = digit_view()
    options = AttackOptions(name="ig-dip")
    one = DipParametrization(options, tuple(x.shape), None, [3], CPU, torch.float32)
    two = DipParametrization(options, tuple(x.shape), None, [5, 3], CPU, torch.float32)
    assert torch.equal(one.w0[0], two.w0[1]) and not torch.equal(two.w0[0], two.w0[1])
    assert torch.allclose(one.images(one.w0)[0], two.images(two.w0)[1], atol=1e-6)


def test_a_few_iterations_lower_the_objective():
    _, view = digit_view()
    start = run_attack(AttackOptions(name="ig-dip", iterations=1), [view], seed=0, device=CPU)[0]
    later = run_attack(AttackOptions(name="ig-dip", iterations=15), [view], seed=0, device=CPU)[0]
    assert later.objective < 0.5 * start.objective


def test_restarts_are_batched_and_the_lowest_objective_wins():
    _, view = digit_view()
    rec = run_attack(AttackOptions(name="ig-dip", iterations=3, restarts=2), [view], seed=0, device=CPU)[0]
    assert len(rec.restart_objectives) == 2 and rec.objective == min(rec.restart_objectives)


def test_options_are_validated_in_one_line():
    with pytest.raises(ValueError, match="init = 'zeros'"):
        AttackOptions(name="ig-dip", init="zeros")
    with pytest.raises(ValueError, match="generator_width"):
        AttackOptions(name="ig-dip", generator_width=0)
    _, view = digit_view()
    with pytest.raises(ValueError, match="generator_levels = 4: 8 px images allow at most 3") as error:
        run_attack(AttackOptions(name="ig-dip", iterations=1, generator_levels=4), [view], seed=0, device=CPU)
    assert "\n" not in str(error.value)
