"""``ig-prune``: the survivors are matched, and every zeroed entry was below the smallest survivor of its scope."""

import torch

from adversary.attacks.ig_prune import pruned_bound_excess, smallest_kept
from adversary.inversion.options import AttackOptions
from adversary.inversion.solver import invert
from adversary.registry import ATTACKS
from tests.unit.adversary.inversion.test_adaptive import CPU, SHAPE, defended_view, setting_for


def test_the_bound_is_the_smallest_survivor_of_the_whole_update_or_of_each_tensor():
    observed = [torch.tensor([0.0, 0.5, -2.0]), torch.tensor([3.0, 0.0])]
    kept = [(o != 0).double() for o in observed]
    assert [float(t) for t in smallest_kept(observed, kept, "global")] == [0.5, 0.5]
    assert [float(t) for t in smallest_kept(observed, kept, "per-tensor")] == [0.5, 3.0]


def test_only_zeroed_entries_above_the_bound_are_penalised():
    observed = [torch.tensor([0.0, 1.0, -2.0, 0.0])]
    kept = [(observed[0] != 0).double()]
    below = [torch.tensor([0.9, 1.0, -2.0, -0.5])]  # zeroed positions below 1: consistent with the pruning
    above = [torch.tensor([1.5, 1.0, -2.0, 0.0])]  # a zeroed position at 1.5 > 1 could not have been pruned
    assert float(pruned_bound_excess(below, observed, kept, "global", relative=False)) == 0.0
    assert float(pruned_bound_excess(above, observed, kept, "global", relative=False)) == 0.5 * 0.5**2
    # relative: the same in units of each side's kept norm, blind to a common factor of the dummy
    scaled = [10 * above[0]]
    assert float(pruned_bound_excess(scaled, observed, kept, "global", relative=True)) > 0
    assert torch.isclose(
        pruned_bound_excess(scaled, observed, kept, "global", relative=True),
        pruned_bound_excess(above, observed, kept, "global", relative=True),
    )


def test_the_zeroed_entries_bound_recovers_a_heavily_pruned_image_better_than_the_survivors_alone():
    errors = {0.0: [], 1.0: []}
    for seed in range(3):
        images = torch.rand(1, *SHAPE, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        defense = {"name": "prune", "ratio": 0.97}
        view, model = defended_view(defense, images, torch.tensor([1]))
        for weight in errors:
            options = AttackOptions(name="ig-prune", iterations=300, regularizers=[], bound_weight=weight)
            options = options.adapted(setting_for(model, defense))
            (reconstruction,) = invert(ATTACKS.get("ig-prune").spec, [view], options, seed=0, device=CPU)
            errors[weight].append(float(((reconstruction.images.reshape(images.shape) - images) ** 2).mean()))
    assert max(errors[1.0]) < min(errors[0.0])
