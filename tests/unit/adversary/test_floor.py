"""The floor under a leakage score: public-data guesses scored like reconstructions, and the verdict against them."""

from pathlib import Path

import numpy as np
import pytest
import torch

from adversary.floor import (
    AT_FLOOR,
    FLOOR_DRAWS,
    LEAKS,
    PUBLIC_MEAN,
    RANDOM_PUBLIC,
    UNKNOWN,
    BaselineScores,
    Floor,
    PublicSplit,
    public_floor,
    verdict_of,
)
from adversary.matching import pair_by_mse
from adversary.metrics import ssim
from fedsim.config import load_config
from fedsim.data import load_dataset

DEFENSE_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "defense-evaluation.yaml"


@pytest.fixture(scope="module")
def defense_model_digits():
    """The MNIST defense model's set-up (configs/defense-evaluation.yaml: 28 px gray digits, batches of 4, the
    test split held out as public) on scikit-learn's bundled digits, upsampled to MNIST's 28 px."""
    config = load_config(DEFENSE_CONFIG, ["data.dataset=digits", "data.image_size=28"])
    dataset = load_dataset(config.data, config.seed)
    public = PublicSplit(torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test))
    batch = slice(0, config.client.batch_size)
    return torch.from_numpy(dataset.x_train[batch]), torch.from_numpy(dataset.y_train[batch]), public


def _mean_ssim(guess: torch.Tensor, truth: torch.Tensor) -> float:
    rec, true = pair_by_mse(guess, truth)
    return float(ssim(guess[rec], truth[true]).mean())


def test_an_all_black_reconstruction_is_at_floor_on_the_mnist_defense_model(defense_model_digits):
    truth, labels, public = defense_model_digits
    black = torch.zeros_like(truth)
    floor = public_floor(truth, labels, public, count=len(black), seed=0)
    black_ssim = _mean_ssim(black, truth)
    assert floor.verdict(black_ssim) == AT_FLOOR
    assert floor.value("ssim") >= black_ssim


def test_a_perfect_reconstruction_leaks(defense_model_digits):
    truth, labels, public = defense_model_digits
    floor = public_floor(truth, labels, public, count=len(truth), seed=0)
    assert floor.verdict(_mean_ssim(truth.flip(0), truth)) == LEAKS  # in another order: pairing undoes it
    assert floor.value("ssim") < 1.0 and floor.value("psnr") < 40.0


def test_the_row_carries_both_baselines_and_the_floor_they_set(defense_model_digits):
    truth, labels, public = defense_model_digits
    row = public_floor(truth, labels, public, count=len(truth), seed=0).to_row(ssim_mean=1.0)
    assert row["verdict"] == LEAKS and row["floor_draws"] == FLOOR_DRAWS
    assert row["floor_source"] in (PUBLIC_MEAN, RANDOM_PUBLIC)
    for metric in ("ssim", "psnr", "label_accuracy"):
        # the floor is a bound: at least each baseline's expected score
        assert row[f"floor_{metric}"] >= row[f"floor_public_mean_{metric}"]
        assert row[f"floor_{metric}"] >= row[f"floor_random_public_{metric}"]
    majority = public.majority_label
    assert row["floor_public_mean_label_accuracy"] == pytest.approx(float((labels == majority).double().mean()))


def test_the_random_draws_are_reproducible_from_the_seed(defense_model_digits):
    truth, labels, public = defense_model_digits
    first, again, other = (public_floor(truth, labels, public, len(truth), seed, draws=8) for seed in (3, 3, 4))
    np.testing.assert_array_equal(first.random_public.ssim, again.random_public.ssim)
    assert not np.array_equal(first.random_public.ssim, other.random_public.ssim)
    np.testing.assert_array_equal(first.public_mean.ssim, other.public_mean.ssim)  # the mean image has no draws


def test_the_floor_is_the_stronger_baselines_95th_percentile_and_the_verdict_is_strictly_above_it():
    def baseline(name, values):
        values = np.asarray(values, dtype=float)
        return BaselineScores(name, values, values * 10, values)

    draws = np.linspace(0.0, 0.4, 21)  # 95th percentile: 0.38
    floor = Floor(baseline(PUBLIC_MEAN, [0.3]), baseline(RANDOM_PUBLIC, draws))
    assert floor.value("ssim") == pytest.approx(0.38) and floor.source() == RANDOM_PUBLIC
    assert floor.verdict(0.38) == AT_FLOOR and floor.verdict(0.381) == LEAKS
    higher_mean = Floor(baseline(PUBLIC_MEAN, [0.5]), baseline(RANDOM_PUBLIC, draws))
    assert higher_mean.value("psnr") == pytest.approx(5.0) and higher_mean.source("psnr") == PUBLIC_MEAN


def test_a_guess_larger_than_the_public_split_draws_with_replacement():
    public = PublicSplit(torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 1]))
    truth = torch.rand(5, 1, 8, 8)
    floor = public_floor(truth, torch.tensor([1, 1, 0, 2, 1]), public, count=5, seed=0, draws=4)
    assert len(floor.random_public.ssim) == 4 and public.majority_label == 1
    assert floor.public_mean.label_accuracy.tolist() == [0.6]


def test_rows_without_a_floor_have_an_unknown_verdict():
    assert verdict_of({"ssim_mean": 0.4}) == UNKNOWN  # written before floors existed
    assert verdict_of({"verdict": AT_FLOOR}) == AT_FLOOR
