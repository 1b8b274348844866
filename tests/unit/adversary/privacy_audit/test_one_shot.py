"""Andrew et al.'s one-shot estimate: the epsilon of the Gaussian the canaries' cosines fit, and nothing where
the inserted canaries look like the null."""

from __future__ import annotations

import numpy as np
import pytest

from adversary.privacy_audit.fdp import gdp_epsilon
from adversary.privacy_audit.one_shot import one_shot_estimate


def cosines(shift: float, canaries: int, seed: int, spread: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Null cosines N(0, spread^2); the inserted canaries' shifted by ``shift * spread``."""
    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    return spread * (shift * included + rng.standard_normal(canaries)), included


def test_gaussian_cosines_give_back_their_separation_and_its_epsilon():
    estimate = one_shot_estimate(*cosines(1.5, 20_000, 0), delta=1e-5)
    assert estimate.mu == pytest.approx(1.5, abs=0.05)
    assert estimate.epsilon == pytest.approx(gdp_epsilon(1.5, 1e-5), abs=0.2)
    assert estimate.mean_out == pytest.approx(0.0, abs=5e-4) and estimate.std_in == pytest.approx(0.01, rel=0.05)


def test_more_separation_more_epsilon_and_none_at_the_null():
    estimates = [one_shot_estimate(*cosines(shift, 5000, 1), delta=1e-5).epsilon for shift in (0.5, 1.0, 2.0)]
    assert estimates[0] < estimates[1] < estimates[2]
    below = one_shot_estimate(*cosines(-1.0, 5000, 2), delta=1e-5)  # inserted canaries below the null
    assert below.mu == 0.0 and below.epsilon == 0.0


def test_the_scale_of_the_cosines_does_not_matter():
    values, included = cosines(1.0, 2000, 3)
    assert one_shot_estimate(values * 100, included, 1e-5).mu == pytest.approx(
        one_shot_estimate(values, included, 1e-5).mu, rel=1e-12
    )


def test_too_few_canaries_on_a_side_is_one_line():
    with pytest.raises(ValueError, match="need two inserted canaries and a null"):
        one_shot_estimate([0.1, 0.2, 0.3], [True, False, False], 1e-5)
