"""The f-DP analysis of one run: monotone in what it should be, finite for perfect guesses, below the truth on
the Gaussian mechanism it assumes, and pointing the same way as the epsilon-delta bound."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from adversary.privacy_audit.bound import GUESS_FRACTIONS, audit_guesses, ceiling, epsilon_lower_bound
from adversary.privacy_audit.fdp import MU_CEILING, excess, gdp_delta, gdp_epsilon, mu_lower_bounds

BETA = 0.05 / len(GUESS_FRACTIONS)


def test_more_right_guesses_reject_more_and_more_confidence_rejects_less():
    correct = np.arange(100, 201, 10)
    bounds = mu_lower_bounds(1000, np.full(len(correct), 200), correct, BETA)
    assert np.all(np.diff(bounds) >= 0) and bounds[0] == 0.0 and bounds[-1] > 1.0
    strict = mu_lower_bounds(1000, np.full(len(correct), 200), correct, BETA / 100)
    assert np.all(strict <= bounds) and strict[-1] < bounds[-1]


def test_the_bound_sits_where_the_recursion_stops_rejecting():
    mu = mu_lower_bounds(1000, [400], [340], BETA)[0]
    assert excess(mu, 1000, 400, 340, BETA) > 0 > excess(mu + 1e-5, 1000, 400, 340, BETA)
    assert np.all(np.diff(excess(np.linspace(0, 2, 50), 1000, 400, 340, BETA)) <= 0)  # larger mu: less rejected


def paper_excess(mu: float, canaries: int, guesses: int, correct: int, beta: float) -> float:
    """The recursion of Mahloujifar et al. for a guessing game with two answers (k = 2), one step at a time:
    start from r = beta c / m and h = beta (g - c) / m, then for i = c - 1 .. 0 set h <- max(h, g_mu(r)) and
    r <- r + i / (g - i) * (h_new - h_old); f-DP holds only if r + h <= g / m at the end."""
    r, h = beta * correct / canaries, beta * (guesses - correct) / canaries
    for i in range(correct - 1, -1, -1):
        grown = max(h, float(stats.norm.cdf(stats.norm.ppf(min(r, 1.0)) - mu)))
        r, h = r + i / (guesses - i) * (grown - h), grown
    return r + h - guesses / canaries


@pytest.mark.parametrize(("guesses", "correct"), [(400, 300), (400, 340), (100, 100), (1000, 990), (50, 20)])
def test_the_vectorised_recursion_decides_as_the_papers_step_by_step_one(guesses, correct):
    mus = np.linspace(0.0, 3.0, 31)
    ours = excess(mus, 1000, guesses, correct, BETA)
    paper = np.array([paper_excess(mu, 1000, guesses, correct, BETA) for mu in mus])
    assert np.array_equal(ours > 0, paper > 0)
    # where mu-GDP stands, the two are the same numbers (they differ only in how far past 1 a rejected r runs)
    assert ours[paper <= 0] == pytest.approx(paper[paper <= 0])


def test_perfect_guesses_give_a_finite_ceiling_that_grows_with_the_canaries():
    ceilings = mu_lower_bounds(5000, [50, 500, 5000], [50, 500, 5000], BETA)
    assert np.all(ceilings < MU_CEILING) and np.all(np.diff(ceilings) > 0)
    epsilon_delta, fdp = ceiling(5000, 1e-5)
    assert 0 < epsilon_delta < fdp < np.inf


def test_the_gdp_epsilon_is_the_gaussian_mechanisms():
    sigma = dp_accounting.get_sigma_gaussian(4.0, 1e-5)  # an independent calibration of the same mechanism
    assert gdp_epsilon(1 / sigma, 1e-5) == pytest.approx(4.0, abs=1e-4)
    assert gdp_delta(1.0, gdp_epsilon(1.0, 1e-5)) == pytest.approx(1e-5, rel=1e-6)
    assert gdp_epsilon(0.5, 1e-5) < gdp_epsilon(1.0, 1e-5) < gdp_epsilon(2.0, 1e-5)
    assert gdp_epsilon(0.0, 1e-5) == 0.0


def test_the_gaussian_mechanism_is_never_audited_above_its_mu():
    """Canary j's score is N(mu * included_j, 1): mu-GDP for each canary, exactly what the analysis assumes."""
    rng = np.random.default_rng(0)
    trials, canaries, true_mu = 40, 1000, 2.0
    included = rng.random((trials, canaries)) < 0.5
    order = np.argsort(included * true_mu + rng.standard_normal((trials, canaries)), axis=1)
    ranked = np.take_along_axis(included, order, axis=1)  # inclusion by rising score
    per_side = np.array([round(f * canaries) for f in GUESS_FRACTIONS])
    right = np.array([(~ranked[:, :k]).sum(axis=1) + ranked[:, canaries - k :].sum(axis=1) for k in per_side]).T
    bounds = mu_lower_bounds(canaries, np.broadcast_to(2 * per_side, right.shape).ravel(), right.ravel(), BETA)
    best = bounds.reshape(right.shape).max(axis=1)
    assert np.all(best <= true_mu)
    assert np.median(best) > 0.5 * true_mu  # and it is not vacuous


def test_it_agrees_in_direction_with_the_epsilon_delta_bound():
    correct = range(200, 401, 25)
    fdp = _fdp_epsilons(correct)
    steinke = [epsilon_lower_bound(1000, 400, c, 1e-5, BETA) for c in correct]
    assert fdp[0] == steinke[0] == 0.0  # chance level rejects nothing in either
    assert np.all(np.diff(fdp) >= 0) and np.all(np.diff(steinke) >= 0)
    # the tighter analysis once the guesses are clearly better than chance (near chance both are about 0.01)
    assert all(f >= s for f, s in zip(fdp[2:], steinke[2:], strict=True))


def _fdp_epsilons(correct) -> list[float]:
    mus = mu_lower_bounds(1000, np.full(len(correct), 400), np.array(correct), BETA)
    return [gdp_epsilon(mu, 1e-5) for mu in mus]


def test_audit_guesses_reports_both_and_names_the_stronger():
    rng = np.random.default_rng(1)
    included = rng.random(2000) < 0.5
    result = audit_guesses(included * 3.0 + rng.standard_normal(2000), included, delta=1e-5)
    assert result.epsilon_lower > 0 and result.gdp_mu_lower > 0
    assert result.epsilon_result == max(result.epsilon_lower, result.fdp_epsilon_lower)
    assert result.analysis == (
        "f-DP (Gaussian)" if result.fdp_epsilon_lower > result.epsilon_lower else "epsilon-delta"
    )
    assert 0 < result.fdp_correct <= result.fdp_guesses <= 2000
