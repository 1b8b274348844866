"""Summaries that fit the metrics: PSNR by median and fractions, bounded scores with in-range bootstrap intervals."""

import math

import numpy as np
import pytest

from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.reporting import summaries


def test_psnr_median_and_fractions_on_known_images():
    # 6 images over two seeds; an exact pair stored as None (JSON) or +inf counts at the cap, above any threshold
    per_seed = [[None, 20.0, 45.0], [math.inf, 12.0, 31.0]]
    summary = summaries.summarize_psnr(per_seed)
    assert summary.median.value == pytest.approx((31.0 + 45.0) / 2)
    assert summary.at_least[30.0].value == pytest.approx(4 / 6)
    assert summary.at_least[40.0].value == pytest.approx(3 / 6)


def test_a_psnr_median_of_mostly_exact_pairs_is_the_cap_not_infinity():
    summary = summaries.summarize_psnr([[math.inf, math.inf, 18.0]])
    assert summary.median.value == PSNR_CAP_DB
    assert summary.median.high == PSNR_CAP_DB
    # one result's median, the column of attack tables: the same statistic, no interval
    assert summaries.median_value([None, 20.0, 45.0, 12.0], cap=PSNR_CAP_DB) == pytest.approx(32.5)
    assert math.isnan(summaries.median_value([]))


def test_ssim_intervals_stay_inside_the_range_with_three_seeds_of_extreme_values():
    # the case a t-interval over 3 seeds takes outside [0, 1] (0.331 +/- 0.530)
    per_seed = [[0.99, 0.98, 1.0], [0.01, 0.0, 0.02], [0.0, 1.0, 0.5]]
    estimate = summaries.mean(per_seed)
    assert 0.0 <= estimate.low <= estimate.value <= estimate.high <= 1.0
    assert estimate.low < estimate.high  # an interval, not a point
    seeds_only = summaries.mean([[0.99, 0.01, 0.02]])  # one value per seed: the seeds resampled
    assert 0.0 <= seeds_only.low < seeds_only.high <= 1.0


def test_fractions_stay_inside_zero_and_one():
    estimate = summaries.fraction_at_least([[50.0, 10.0], [45.0, 44.0], [5.0, 6.0]], 40.0)
    assert estimate.value == pytest.approx(0.5)
    assert 0.0 <= estimate.low <= 0.5 <= estimate.high <= 1.0


def test_the_bootstrap_is_reproducible_with_a_seed_and_its_seed_is_used():
    per_seed = [[(i * 0.37) % 1 for i in range(1, 16)], [(i * 0.61) % 1 for i in range(1, 16)]]  # 30 distinct
    assert summaries.mean(per_seed, seed=3) == summaries.mean(per_seed, seed=3)
    assert summaries.mean(per_seed, seed=3) != summaries.mean(per_seed, seed=4)  # resampled, not fixed


def test_strata_are_kept_images_resampled_within_each():
    # two seeds, each constant: resampling within a seed changes nothing, so the interval is the point
    estimate = summaries.mean([[0.2, 0.2], [0.8, 0.8, 0.8]])
    assert (estimate.value, estimate.low, estimate.high) == pytest.approx((0.56, 0.56, 0.56))


def test_a_single_value_has_no_interval_and_no_value_is_empty():
    single = summaries.mean([[0.4]])
    assert single.value == 0.4 and math.isnan(single.low) and single.text(3) == "0.400"
    assert summaries.mean([[], []]).text(3) == ""


def test_a_singleton_stratum_is_held_fixed_beside_resampled_ones():
    estimate = summaries.mean([[1.0], [0.0, 0.5]])
    assert estimate.value == pytest.approx(0.5)
    assert estimate.low >= 1 / 3 and estimate.high <= 2 / 3  # the 1.0 is in every resample


def test_text_shows_value_and_interval():
    assert summaries.Estimate(0.331, 0.12, 0.61).text(3) == "0.331 [0.120, 0.610]"


def test_a_nan_score_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        summaries.mean([[0.5, math.nan]])


def test_nested_intervals_carry_the_seed_to_seed_variation_the_stratified_one_leaves_out():
    # four seeds that disagree, each with identical images: only resampling the seeds sees the spread
    per_seed = [[10.0] * 3, [20.0] * 3, [30.0] * 3, [40.0] * 3]
    within = summaries.median(per_seed)
    nested = summaries.nested_median(per_seed)
    assert within.low == within.high == 25.0
    assert nested.value == 25.0
    assert nested.low <= 15.0 and nested.high >= 35.0
    assert 10.0 <= nested.low < nested.high <= 40.0


def test_nested_intervals_also_resample_images_within_a_seed():
    one_seed = summaries.nested_median([[10.0, 20.0, 30.0, 40.0, 50.0]])
    assert one_seed.value == 30.0
    assert 10.0 <= one_seed.low < 30.0 < one_seed.high <= 50.0
    # unequal seeds take the general path, capped values count at the cap
    unequal = summaries.nested_median([[math.inf, 90.0], [10.0, 20.0, 30.0]], cap=PSNR_CAP_DB)
    assert unequal.value == 30.0
    assert 10.0 <= unequal.low < 30.0 < unequal.high <= PSNR_CAP_DB


def test_nested_bootstrap_is_reproducible_and_a_single_value_has_no_interval():
    per_seed = np.random.default_rng(0).random((6, 5)).tolist()

    def mean(values):
        return values.mean(axis=-1)

    assert summaries.nested_bootstrap(per_seed, mean, seed=2) == summaries.nested_bootstrap(per_seed, mean, seed=2)
    assert summaries.nested_bootstrap(per_seed, mean, seed=2) != summaries.nested_bootstrap(per_seed, mean, seed=5)
    single = summaries.nested_median([[7.0]])
    assert single.value == 7.0 and math.isnan(single.low)
    assert math.isnan(summaries.nested_median([[], []]).value)
