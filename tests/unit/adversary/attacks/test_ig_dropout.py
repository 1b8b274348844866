"""``ig-dropout``'s likelihood: kept entries are the gradient over p exactly, dropped ones are N(0, sigma^2)."""

import torch

from adversary.attacks.ig_dropout import dropout_nll
from adversary.inversion.options import AttackOptions
from adversary.inversion.problem import BatchedProblem
from adversary.inversion.solver import invert
from adversary.registry import ATTACKS
from tests.unit.adversary.inversion.test_adaptive import CPU, SHAPE, defended_view, setting_for


def test_the_likelihood_prefers_the_candidate_that_explains_the_kept_entries_exactly():
    generator = torch.Generator().manual_seed(0)
    gradient = torch.randn(4000, generator=generator, dtype=torch.float64) * 0.1
    kept = torch.rand(4000, generator=generator, dtype=torch.float64) < 0.6
    observed = torch.where(kept, gradient, torch.randn(4000, generator=generator, dtype=torch.float64) * 0.05)
    wrong = gradient + torch.randn(4000, generator=generator, dtype=torch.float64) * 0.02
    at_truth = dropout_nll([gradient], [observed], p=0.6, noise_std=0.05, kept_std=0.025)
    assert at_truth < dropout_nll([wrong], [observed], p=0.6, noise_std=0.05, kept_std=0.025)
    assert at_truth < dropout_nll([torch.zeros(4000, dtype=torch.float64)], [observed], 0.6, 0.05, 0.025)


def test_the_objective_is_lower_at_the_true_images_than_at_other_images():
    images = torch.rand(1, *SHAPE, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    defense = {"name": "gradient_dropout", "p": 0.6, "sigma": 0.1}
    view, model = defended_view(defense, images, torch.tensor([1]))
    options = AttackOptions(name="ig-dropout", regularizers=[]).adapted(setting_for(model, defense))
    problem = BatchedProblem.build(ATTACKS.get("ig-dropout").spec, options, [view], [0], CPU, torch.float64)
    at_truth = float(problem.objective_at(0, images))
    for seed in range(5):
        other = torch.rand(1, *SHAPE, generator=torch.Generator().manual_seed(10 + seed), dtype=torch.float64)
        assert at_truth < float(problem.objective_at(0, other))


def test_the_likelihood_recovers_an_image_whose_kept_entries_the_noise_hides_from_a_threshold():
    # sigma 0.3 is above most gradient entries: almost none clear 4 sigma, yet 60 % of them are exact
    images = torch.rand(1, *SHAPE, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    defense = {"name": "gradient_dropout", "p": 0.6, "sigma": 0.3}
    view, model = defended_view(defense, images, torch.tensor([1]))
    options = AttackOptions(name="ig-dropout", iterations=300, regularizers=[]).adapted(setting_for(model, defense))
    spec = ATTACKS.get("ig-dropout").spec

    def error(attack_options: AttackOptions) -> float:
        (reconstruction,) = invert(spec, [view], attack_options, seed=0, device=CPU)
        return float(((reconstruction.images.reshape(images.shape) - images) ** 2).mean())

    likelihood = error(options)
    threshold = error(options.model_copy(update={"dropout_sigma": 0.0}))  # the entries above 4 sigma only
    assert likelihood < 0.02 < 0.5 < threshold
