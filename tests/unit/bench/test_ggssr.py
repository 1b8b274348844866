"""bench.ggssr's own logic: ig-noise told the noise from what the attacker sees, victims nested in seeds and
intervals that resample both, the tuning pick and the results table."""

from __future__ import annotations

import math

import pytest
import torch

from adversary.inversion import AttackOptions
from bench import ggssr
from fedsim.config import DataConfig, ModelConfig
from fedsim.data import load_dataset
from fedsim.models import build_model
from fedsim.reporting.summaries import Estimate


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)


def clean_and_noisy_views(digits, scale: float, distribution: str = "gaussian"):
    model = build_model(ModelConfig(name="cnn"), 1, 10, 8, 0)
    x, y = torch.from_numpy(digits.x_train[:1]), torch.from_numpy(digits.y_train[:1])
    clean = ggssr.noisy_view(model, x, y, 0.0, distribution, 0)
    noisy = ggssr.noisy_view(model, x, y, scale, distribution, 0)
    return clean, noisy


def rms(view) -> float:
    return float(torch.cat([d.reshape(-1) for d in view.parameter_delta().values()]).pow(2).mean().sqrt())


@pytest.mark.parametrize("scale", [1.0, 10.0])
@pytest.mark.parametrize("distribution", ["gaussian", "laplace"])
def test_the_noise_std_is_estimated_from_the_observed_update_close_to_the_true_one(digits, scale, distribution):
    clean, noisy = clean_and_noisy_views(digits, scale, distribution)
    true_std = scale * rms(clean)  # what the bench added; the estimate never sees the clean update
    assert ggssr.estimated_noise_std(noisy, scale) == pytest.approx(true_std, rel=0.05)


def test_ig_noise_is_adapted_to_the_estimated_std_and_refuses_without_noise(digits):
    _, noisy = clean_and_noisy_views(digits, 3.0)
    estimate = ggssr.estimated_noise_std(noisy, 3.0)
    options = ggssr.ig_noise(1e-3, 10)
    for distribution in ("gaussian", "laplace"):  # Laplace is published by its scale b; ig-noise undoes it
        adapted = options.adapted(ggssr.noise_in_force(noisy, 3.0, distribution))
        assert adapted.noise_sigma == pytest.approx(estimate)
        assert adapted.tv_weight == 1e-3  # the tuned weight, not the attack's default
    assert options.refusal(ggssr.noise_in_force(noisy, 0.0, "gaussian")) is not None


def test_measure_scores_ig_noise_only_where_there_is_noise(digits):
    attacks = {"ig_noise": ggssr.ig_noise(1e-3, 2), "ig": AttackOptions(name="ig", iterations=2)}
    scores = ggssr.measure(digits, attacks, [0.0, 1.0], "gaussian", 1, ggssr.nested_victims(0, 1, 1, 2))
    assert scores["ig_noise"][0] == [[], []]
    assert [len(per_seed) for per_seed in scores["ig_noise"][1]] == [1, 1]
    assert [len(per_seed) for per_seed in scores["ig"][0]] == [1, 1]
    assert math.isnan(ggssr.median_psnr(scores["ig_noise"][0]).value)


def test_each_seed_attacks_its_own_images():
    victims = ggssr.nested_victims(100, 4, 2, 3)
    assert victims == [[100, 104], [108, 112], [116, 120]]
    firsts = [first for per_seed in victims for first in per_seed]
    assert len(set(firsts)) == len(firsts)


def test_the_interval_resamples_the_seeds_not_only_the_images():
    per_seed = [[20.0, 20.0], [24.0, 24.0], [28.0, 28.0], [32.0, 32.0]]
    estimate = ggssr.median_psnr(per_seed)
    assert estimate.value == 26.0
    assert estimate.low < 24.0 and estimate.high > 28.0  # images alone would give [26, 26]


def test_the_tuning_pick_is_the_best_mean_and_every_attack_has_a_grid():
    assert ggssr.best_setting({"tv 0.1": 10.0, "tv 0.01": 12.5, "tv 1": 12.0}) == "tv 0.01"
    grid = ggssr.tuning_grid({"name": "diffusers", "path": "unused"})
    assert set(grid) == {"ggssr", "ig", "ig-noise", "dlg"}
    tuned = f"tv {ggssr.TUNED_IG_NOISE['ig_noise_tv']:g} iterations {ggssr.TUNED_IG_NOISE['ig_noise_iterations']}"
    assert tuned in grid["ig-noise"]  # the recorded pick is one of the settings the grid tries


def test_the_table_shows_intervals_and_a_dash_where_an_attack_did_not_run():
    medians = {
        "ggssr": [Estimate(28.6, 25.0, 31.0), Estimate(19.7, 17.0, 22.5)],
        "ig_noise": [Estimate(math.nan, math.nan, math.nan), Estimate(15.0, 12.0, 18.0)],
    }
    lines = ggssr.markdown_table([0.0, 10.0], medians)
    assert lines[0] == "| noise scale | GGSS-R | ig-noise |"
    assert lines[2] == "| 0 | 28.60 [25.00, 31.00] | - |"
    assert lines[3] == "| 10 | 19.70 [17.00, 22.50] | 15.00 [12.00, 18.00] |"
    assert ggssr.rounded(math.nan) is None
