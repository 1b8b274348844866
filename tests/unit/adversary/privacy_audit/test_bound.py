"""The one-run bound: its binomial tail against scipy's, and randomised response audited at its known epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from adversary.privacy_audit.bound import (
    audit_guesses,
    epsilon_lower_bound,
    guesses_at,
    p_value,
    randomised_response_accuracy,
)


@pytest.mark.parametrize(("guesses", "correct", "epsilon"), [(10, 7, 0.5), (100, 80, 1.0), (1000, 990, 4.0)])
def test_pure_dp_p_value_is_the_binomial_tail(guesses, correct, epsilon):
    q = math.exp(epsilon) / (1 + math.exp(epsilon))
    direct = sum(stats.binom.pmf(k, guesses, q) for k in range(correct, guesses + 1))
    assert p_value(1000, guesses, correct, epsilon, delta=0.0) == pytest.approx(direct, rel=1e-9)


def test_delta_only_adds_probability_and_is_the_papers_term():
    m, r, v, eps, delta = 1000, 200, 150, 1.0, 1e-5
    q = randomised_response_accuracy(eps)
    alpha = max(sum(stats.binom.pmf(v - j, r, q) for j in range(1, i + 1)) / i for i in range(1, v + 1))
    expected = stats.binom.sf(v - 1, r, q) + 2 * m * delta * alpha
    assert p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-9)
    assert p_value(m, r, v, eps, delta) > p_value(m, r, v, eps, 0.0)


def test_the_bound_is_where_the_p_value_crosses_beta():
    bound = epsilon_lower_bound(1000, 400, 340, delta=1e-5, beta=0.05)
    assert bound > 0
    assert p_value(1000, 400, 340, bound, 1e-5) < 0.05 <= p_value(1000, 400, 340, bound + 1e-4, 1e-5)
    assert epsilon_lower_bound(1000, 400, 200, delta=1e-5, beta=0.05) == 0.0  # chance level proves nothing
    assert epsilon_lower_bound(1000, 400, 360, delta=0.0, beta=0.05) > bound  # more right guesses, more epsilon


def test_guesses_take_the_extremes_of_the_scores():
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.2, 0.4])
    included = np.array([True, False, True, False, False, True])
    # "in" for 0.9 and 0.8 (one right), "out" for 0.1 and 0.2 (both right)
    assert guesses_at(scores, included, 2) == (4, 3)


def randomised_response(epsilon: float, canaries: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each canary's bit, reported truthfully with probability e^eps / (1 + e^eps): an eps-DP mechanism, exactly."""
    included = rng.random(canaries) < 0.5
    truthful = rng.random(canaries) < randomised_response_accuracy(epsilon)
    reported = np.where(truthful, included, ~included)
    return reported + 0.5 * rng.random(canaries), included  # ties broken at random


def test_randomised_response_is_audited_close_below_its_epsilon():
    rng = np.random.default_rng(0)
    scores, included = randomised_response(2.0, 20_000, rng)
    result = audit_guesses(scores, included, delta=0.0, confidence=0.95)
    assert 1.8 < result.epsilon_lower <= 2.0
    assert result.correct / result.guesses == pytest.approx(randomised_response_accuracy(2.0), abs=0.02)


def test_randomised_response_is_rarely_audited_above_its_epsilon():
    rng = np.random.default_rng(1)
    bounds = [
        audit_guesses(*randomised_response(1.0, 500, rng), delta=0.0, confidence=0.9).epsilon_lower for _ in range(60)
    ]
    above = sum(bound > 1.0 for bound in bounds)
    assert above <= 6  # at most the 10 % the confidence allows (the split over guess counts makes it rarer)
    assert np.mean(bounds) > 0.5  # and the audit is not vacuous


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: audit_guesses([0.1, 0.2], [True], delta=0.0), "need two equal 1-D arrays"),
        (lambda: audit_guesses([0.1, math.nan], [True, False], delta=0.0), "must be finite"),
        (lambda: audit_guesses([0.1, 0.2], [True, False], delta=0.0, confidence=1.0), "confidence = 1.0"),
        (lambda: p_value(10, 5, 6, 1.0, 0.0), "correct = 6"),
    ],
)
def test_bad_input_is_one_line_naming_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()
