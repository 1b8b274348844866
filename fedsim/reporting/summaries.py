"""Summaries of per-image leakage scores that fit the metrics: the one place every table and report gets them.

Two habits misled before: a mean of PSNRs capped at 100 dB mixes exact copies with 20 dB blurs (82.1 ± 40.9
says neither), and a Student-t interval over 3 seeds of a bounded score leaves its range (SSIM 0.331 ± 0.530).
So:

* **PSNR** is summarised by its **median** and by the **fraction of images at or above 30 dB and 40 dB**
  (``summarize_psnr``). Exact pairs (+inf, or None as the run directory stores them) count at
  ``PSNR_CAP_DB``: the median is then "100" only when more than half the images came back exactly.
* **Bounded scores** (SSIM, label accuracy, fractions) are summarised by their mean over images
  (``mean``), each image weighing the same.

Every figure comes with a 95 % **percentile bootstrap** interval, stratified by seed: the seeds are kept, and
within each seed the images are resampled with replacement (``scipy.stats.bootstrap``, one sample per seed,
the statistic computed on all resampled images together). Why this one:

* A percentile interval's ends are values the statistic took on resampled data; a mean, median or fraction
  of values in a range stays in that range, so the interval lies inside the metric's range (SSIM in
  [-1, 1], a fraction in [0, 1]) without any clipping. BCa shares that property but is unstable on the
  two-image strata of small federations and undefined where every value is equal; the plain percentile
  method is neither.
* Resampling images within seeds says how much a figure depends on which images were drawn, for the models
  these seeds initialised. Resampling the seeds too (a cluster bootstrap) would answer how it varies from
  seed to seed, but with 3 seeds it has 10 distinct resamples and says little; more seeds answer that.
  A stratum with a single value cannot be resampled and is kept as it is.

Where each seed has images of its own (images **nested** in seeds: seed s attacks images no other seed
attacks, as in ``bench.ggssr``) and there are enough seeds, ``nested_median`` and ``nested_bootstrap``
resample both levels: the seeds with replacement, then the images within each drawn seed (a two-stage cluster
bootstrap). Its interval carries the seed-to-seed variation as well as the image-to-image one; with a handful
of seeds it is wide, which is the honest answer there.

Values measured once per seed (test accuracy, its drop) have no images: their callers pass one stratum of
per-seed values, so the seeds are resampled; with 3 seeds that interval is no wider than what was seen.
Resampling uses a fixed seed (``seed``), so a regenerated table prints the same interval for the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedsim.judge.scoring import PSNR_CAP_DB

CONFIDENCE = 0.95
RESAMPLES = 9999
SEED = 0
#: PSNR thresholds (dB) whose fractions summarise PSNR: ~30 dB a near copy, 40 dB an image recovered (paper 001)
PSNR_THRESHOLDS_DB = (30.0, 40.0)

Strata = Sequence[Sequence[float | None]]  # one sequence of per-image values per seed
Statistic = Callable[[np.ndarray], np.ndarray]  # values along the last axis -> one value per leading index


@dataclass(frozen=True)
class Estimate:
    """A summary figure and its 95 % bootstrap interval.

    Attributes
    ----------
    value
        The figure (NaN for no values).
    low
        The interval's lower end; NaN where nothing could be resampled (a single value).
    high
        The interval's upper end; NaN where ``low`` is.
    """

    value: float
    low: float
    high: float

    def text(self, digits: int) -> str:
        """The estimate as table text.

        Parameters
        ----------
        digits
            Decimal places of the value and of the interval's ends.

        Returns
        -------
        str
            ``"0.331 [0.120, 0.610]"``, or the value alone without an interval; empty for no value.
        """
        if math.isnan(self.value):
            return ""
        if math.isnan(self.low):
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class PsnrSummary:
    """PSNR of a set of images: the median (dB) and the fraction at or above each of ``PSNR_THRESHOLDS_DB``.

    Attributes
    ----------
    median
        The median PSNR (dB), exact pairs counted at ``PSNR_CAP_DB``.
    at_least
        Threshold (dB) -> the fraction of the images at or above it.
    """

    median: Estimate
    at_least: dict[float, Estimate]  # threshold (dB) -> fraction of the images at or above it


def _strata(groups: Strata, cap: float | None = None) -> list[np.ndarray]:
    """The non-empty strata as float arrays; None (an exact PSNR, as stored) is +inf, capped at ``cap``."""
    arrays = []
    for group in groups:
        values = np.array([math.inf if v is None else v for v in group], dtype=float)
        if cap is not None:
            values = np.minimum(values, cap)
        if np.isnan(values).any():
            raise ValueError("a score is NaN: leave unscored images out rather than summarising them")
        if len(values):
            arrays.append(values)
    return arrays


def bootstrap(groups: Strata, statistic: Statistic, seed: int = SEED, cap: float | None = None) -> Estimate:
    """``statistic`` of all values together, with its stratified percentile bootstrap interval (module doc).

    Parameters
    ----------
    groups
        One sequence of per-image values per seed (the strata); None is an exact value (+inf).
    statistic
        Values along the last axis -> one value per leading index (vectorised, as ``scipy.stats.bootstrap``
        calls it).
    seed
        The resampling's seed: the same runs print the same interval.
    cap
        Values above it are counted at it (None: no cap).

    Returns
    -------
    Estimate
        The figure and its interval (NaN ends where nothing could be resampled; all NaN for no values).
    """
    strata = _strata(groups, cap)
    if not strata:
        return Estimate(math.nan, math.nan, math.nan)
    pooled = np.concatenate(strata)
    value = float(statistic(pooled))
    resampled = [s for s in strata if len(s) > 1]
    if not resampled:
        return Estimate(value, math.nan, math.nan)
    fixed = [s for s in strata if len(s) == 1]

    def pooled_statistic(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        samples = tuple(np.moveaxis(s, axis, -1) for s in samples)
        batch = samples[0].shape[:-1]
        kept = [np.broadcast_to(s, (*batch, 1)) for s in fixed]
        return statistic(np.concatenate([*samples, *kept], axis=-1))

    result = stats.bootstrap(
        tuple(resampled),
        pooled_statistic,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        batch=1000,  # bounds memory on large aggregates (RESAMPLES x all images at once otherwise)
        rng=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return Estimate(value, low, high)


def nested_bootstrap(groups: Strata, statistic: Statistic, seed: int = SEED, cap: float | None = None) -> Estimate:
    """``statistic`` of all values together, with a two-stage percentile bootstrap interval for images nested in
    seeds: each resample draws the seeds with replacement, then the images within each drawn seed (module doc)."""
    strata = _strata(groups, cap)
    if not strata:
        return Estimate(math.nan, math.nan, math.nan)
    value = float(statistic(np.concatenate(strata)))
    if len(strata) == 1 and len(strata[0]) == 1:
        return Estimate(value, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    drawn_seeds = rng.integers(len(strata), size=(RESAMPLES, len(strata)))
    sizes = {len(s) for s in strata}
    if len(sizes) == 1:  # equal strata (the usual design): every resample at once
        (size,) = sizes
        table = np.stack(strata)
        drawn_images = rng.integers(size, size=(RESAMPLES, len(strata), size))
        values = table[drawn_seeds[:, :, None], drawn_images].reshape(RESAMPLES, -1)
        resampled = statistic(values)
    else:
        resampled = np.array(
            [
                statistic(np.concatenate([strata[k][rng.integers(len(strata[k]), size=len(strata[k]))] for k in row]))
                for row in drawn_seeds
            ]
        )
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return Estimate(value, float(low), float(high))


def _mean(values: np.ndarray) -> np.ndarray:
    return values.mean(axis=-1)


def _median(values: np.ndarray) -> np.ndarray:
    return np.median(values, axis=-1)


def _fraction_at_least(threshold: float) -> Statistic:
    return lambda values: (values >= threshold).mean(axis=-1)


def mean(groups: Strata, seed: int = SEED) -> Estimate:
    """Mean over all images of a bounded score (SSIM, label accuracy, a 0/1 outcome), in-range interval.

    Parameters
    ----------
    groups
        One sequence of per-image values per seed (the strata); None is an exact value (+inf).
    seed
        The resampling's seed: the same runs print the same interval.

    Returns
    -------
    Estimate
        The figure and its interval (NaN ends where nothing could be resampled; all NaN for no values).
    """
    return bootstrap(groups, _mean, seed)


def median(groups: Strata, seed: int = SEED, cap: float | None = None) -> Estimate:
    """Median over all images.

    Parameters
    ----------
    groups
        One sequence of per-image values per seed (the strata); None is an exact value (+inf).
    seed
        The resampling's seed: the same runs print the same interval.
    cap
        Values above it are counted at it (None: no cap).

    Returns
    -------
    Estimate
        The figure and its interval (NaN ends where nothing could be resampled; all NaN for no values).
    """
    return bootstrap(groups, _median, seed, cap)


def nested_median(groups: Strata, seed: int = SEED, cap: float | None = None) -> Estimate:
    """Median over all images (values above ``cap`` counted at it), seeds and images within seeds resampled."""
    return nested_bootstrap(groups, _median, seed, cap)


def median_value(values: Sequence[float | None], cap: float | None = None) -> float:
    """The median of one result's values (above ``cap`` counted at it), without an interval: for a column of
    per-result figures, the same statistic as ``median``. NaN for no values."""
    strata = _strata([values], cap)
    return float(_median(strata[0])) if strata else math.nan


def fraction_at_least(groups: Strata, threshold: float, seed: int = SEED) -> Estimate:
    """Fraction of all images whose value is at or above ``threshold`` (None counts as +inf: above any).

    Parameters
    ----------
    groups
        One sequence of per-image values per seed (the strata); None is an exact value (+inf).
    threshold
        The value an image must reach.
    seed
        The resampling's seed: the same runs print the same interval.

    Returns
    -------
    Estimate
        The figure and its interval (NaN ends where nothing could be resampled; all NaN for no values).
    """
    return bootstrap(groups, _fraction_at_least(threshold), seed)


def summarize_psnr(groups: Strata, seed: int = SEED) -> PsnrSummary:
    """PSNR per image, one sequence per seed -> median and fractions at or above ``PSNR_THRESHOLDS_DB``.

    Parameters
    ----------
    groups
        PSNR per image (dB; +inf or None for an exact pair), one sequence per seed.
    seed
        The resampling's seed: the same runs print the same intervals.

    Returns
    -------
    PsnrSummary
        The median and the fractions, each with its interval.
    """
    return PsnrSummary(
        median=median(groups, seed, cap=PSNR_CAP_DB),
        at_least={threshold: fraction_at_least(groups, threshold, seed) for threshold in PSNR_THRESHOLDS_DB},
    )
