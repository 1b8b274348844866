"""``fedleak``: partial gradient matching (each tensor's largest entries) and the dummy update's norm as a penalty."""

import torch

from adversary.attacks.fedleak import largest_entries
from adversary.inversion.options import AttackOptions
from adversary.inversion.regularizers import REGULARIZERS, RegularizerContext
from adversary.inversion.solver import invert
from adversary.registry import ATTACKS
from tests.unit.adversary.inversion.test_adaptive import CPU, SHAPE, defended_view


def test_partial_matching_keeps_the_largest_share_of_every_tensor():
    observed = torch.tensor([0.1, -4.0, 0.3, 2.0, -0.2, 1.0, 0.0, 0.05])
    assert largest_entries(observed, 0.25).tolist() == [0, 1, 0, 1, 0, 0, 0, 0]
    assert largest_entries(observed, 0.5).tolist() == [0, 1, 1, 1, 0, 1, 0, 0]
    assert largest_entries(observed, 1.0).sum() == 8


def test_entries_left_out_of_the_partial_matching_do_not_count():
    options = AttackOptions(name="fedleak", match_fraction=0.5)
    observed = [torch.tensor([1.0, -3.0, 0.01, 0.02]), torch.tensor([[2.0, 0.001]])]
    differs_on_small = [torch.tensor([1.0, -3.0, 5.0, -5.0]), torch.tensor([[2.0, 9.0]])]
    differs_on_large = [torch.tensor([-1.0, -3.0, 0.01, 0.02]), torch.tensor([[2.0, 0.001]])]
    assert float(options.gradient_match(differs_on_small, observed, [], False)) < 1e-6  # float32 rounding
    assert float(options.gradient_match(differs_on_large, observed, [], False)) > 0.1


def test_the_gradient_penalty_is_the_dummy_update_size_in_units_of_the_observed_one():
    observed = [torch.tensor([3.0, -4.0])]
    x = torch.zeros(1, 1, 2, 2)
    for name, doubled in (("gradient_l2", 4.0), ("gradient_l1", 2.0)):
        term = REGULARIZERS.get(name).term
        same = RegularizerContext(dummy_update=observed, observed_update=observed)
        twice = RegularizerContext(dummy_update=[2 * observed[0]], observed_update=observed)
        assert float(term(x, same)) == 1.0 and float(term(x, twice)) == doubled


def test_fedleak_recovers_a_small_image_far_better_than_a_guess():
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(1, *SHAPE, generator=generator, dtype=torch.float64)
    guess = torch.rand(1, *SHAPE, generator=generator, dtype=torch.float64)
    view, _ = defended_view({"name": "prune", "ratio": 1e-4}, image, torch.tensor([2]))  # prunes no entry
    options = AttackOptions(name="fedleak", iterations=300)
    (reconstruction,) = invert(ATTACKS.get("fedleak").spec, [view], options, seed=0, device=CPU)
    error = float(((reconstruction.images.reshape(image.shape).clamp(0, 1) - image) ** 2).mean())
    assert error < float(((guess - image) ** 2).mean()) / 10
