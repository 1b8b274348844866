"""Pruning zeroes exactly the requested fraction of smallest entries."""

import pytest
import torch
from defense_updates import apply, random_update

from clients.defenses.base import flatten


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.9])
def test_prune_zeroes_exactly_the_requested_fraction_of_smallest_entries(ratio):
    update = random_update()
    outcome = apply({"name": "prune", "ratio": ratio}, update)
    before, after = flatten(update), flatten(outcome.update)
    n = before.numel()
    assert int((after == 0).sum()) == round(ratio * n)
    zeroed = after == 0
    assert before[zeroed].abs().max() <= before[~zeroed].abs().min()  # the smallest magnitudes, globally
    assert torch.equal(after[~zeroed], before[~zeroed])
    assert outcome.record["fraction_zero"] == pytest.approx(round(ratio * n) / n)


def test_prune_per_tensor_counts_each_tensor_and_breaks_ties_exactly():
    update = {"a": torch.zeros(10), "b": torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 5.0])}
    outcome = apply({"name": "prune", "ratio": 0.25, "scope": "per-tensor"}, update)
    assert int((outcome.update["b"] == 0).sum()) == 2  # two of the four tied ones, not all four
    assert torch.equal(outcome.update["b"][4:], update["b"][4:])
    assert int((outcome.update["a"] == 0).sum()) == 10
