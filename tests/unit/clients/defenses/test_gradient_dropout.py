"""Gradient dropout keeps about p of the entries, unbiased."""

import math

import pytest
import torch
from defense_updates import apply, context, random_update


def test_gradient_dropout_keeps_about_p_of_the_entries_scaled_by_one_over_p():
    update = {"w": torch.linspace(1, 2, 20_000, dtype=torch.float64)}  # no entry is near a noise value
    outcome = apply({"name": "gradient_dropout", "p": 0.6, "sigma": 5e-3}, update)
    kept = torch.isclose(outcome.update["w"], update["w"] / 0.6)
    n = update["w"].numel()
    assert abs(kept.float().mean().item() - 0.6) < 4 * math.sqrt(0.6 * 0.4 / n)
    assert outcome.record["fraction_kept"] == pytest.approx(kept.float().mean().item())
    replaced = outcome.update["w"][~kept]
    assert replaced.std().item() == pytest.approx(5e-3, rel=0.05)  # N(0, sigma^2) in place of the rest
    assert abs(replaced.mean().item()) < 4 * 5e-3 / math.sqrt(len(replaced))


def test_gradient_dropout_is_unbiased_in_expectation():
    update = random_update(shapes=((30,),))
    draws = torch.stack(
        [
            apply({"name": "gradient_dropout", "p": 0.3, "sigma": 0.1}, update, context(seed)).update["layer0"]
            for seed in range(4000)
        ]
    )
    # E[out] = p * g / p + (1 - p) * 0 = g; the per-entry standard error of a 4000-draw mean is < 0.05 here
    assert torch.allclose(draws.mean(0), update["layer0"], atol=0.1)
    assert not torch.allclose(draws[0], draws[1])  # a fresh mask every draw (every round, every client)


def test_gradient_dropout_with_p_one_sends_the_gradient_unchanged():
    update = random_update()
    outcome = apply({"name": "gradient_dropout", "p": 1.0, "sigma": 1.0}, update)
    assert all(torch.equal(outcome.update[k], update[k]) for k in update)
    assert outcome.record["fraction_changed"] == 0.0
