"""The one-run lower bound on epsilon (Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023), from the auditor's guesses about which canaries were included.

Setting: m canaries, each included in training independently with probability 1/2. The auditor scores every
canary from what its threat model sees, guesses "included" for the ``k_plus`` highest scores and "excluded" for
the ``k_minus`` lowest, and abstains on the rest: ``r = k_plus + k_minus`` guesses, ``v`` of them right.

What is computed (their Theorem 5.2 and the numerical procedure of their appendix):

* For an (epsilon, delta)-DP mechanism, the p-value of ``v`` or more right guesses out of ``r`` is at most
  ``P[Binomial(r, q) >= v] + 2 m delta alpha`` with ``q = e^eps / (1 + e^eps)`` (the accuracy of eps-DP
  randomised response) and ``alpha = max_{1 <= i <= v} P[v - i <= Binomial(r, q) < v] / i``. With
  ``delta = 0`` it is the binomial tail alone.
* The lower bound at confidence ``1 - beta`` is the largest epsilon whose p-value is below ``beta``: every
  smaller epsilon would have made the observed ``v`` that improbable, so the mechanism is not eps-DP for them
  (with probability at least ``1 - beta`` over the canaries' coin flips). The p-value grows with epsilon, so a
  bisection finds it (to 1e-6); 0 when even epsilon = 0 is not rejected.

Choosing the guess counts after seeing the scores would void the confidence, so ``audit_guesses`` tries a fixed
list of counts and splits ``beta`` evenly among them (Bonferroni): the reported maximum holds at the stated
confidence. On the same counts and split it also runs the f-DP analysis for Gaussian DP (``fdp``); the result
keeps both bounds and names the stronger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from adversary.privacy_audit.fdp import best_gaussian_bound

EPSILON_DELTA, GAUSSIAN_FDP = "epsilon-delta", "f-DP (Gaussian)"

#: guesses per side tried by ``audit_guesses``, as fractions of the canaries (Bonferroni over all of them)
GUESS_FRACTIONS = (0.5, 0.25, 0.1, 0.05, 0.02)

_EPSILON_CEILING = 100.0  # no count of canaries ever supports more: q would round to 1


def randomised_response_accuracy(epsilon: float) -> float:
    """``e^eps / (1 + e^eps)``: the best accuracy an eps-DP mechanism allows for one guess about one canary."""
    return 1.0 / (1.0 + math.exp(-epsilon))


def p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """The most probability an (epsilon, delta)-DP mechanism gives ``correct`` or more right of ``guesses``."""
    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(f"correct = {correct}, guesses = {guesses}, canaries = {canaries}: need 0 <= c <= g <= m")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"epsilon = {epsilon}, delta = {delta}: need epsilon >= 0 and 0 <= delta <= 1")
    q = randomised_response_accuracy(epsilon)
    tail = float(stats.binom.sf(correct - 1, guesses, q))  # P[X >= correct]
    if delta == 0 or correct == 0:
        return min(tail, 1.0)
    below = np.cumsum(stats.binom.pmf(correct - np.arange(1, correct + 1), guesses, q))  # P[v - i <= X < v]
    alpha = float(np.max(below / np.arange(1, correct + 1)))
    return min(tail + 2 * canaries * delta * alpha, 1.0)


def epsilon_lower_bound(canaries: int, guesses: int, correct: int, delta: float, beta: float) -> float:
    """The largest epsilon under which ``correct`` right of ``guesses`` has p-value below ``beta`` (0: none)."""
    if not 0 < beta < 1:
        raise ValueError(f"beta = {beta}: must be in (0, 1) (1 - the confidence)")
    if p_value(canaries, guesses, correct, 0.0, delta) >= beta:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(canaries, guesses, correct, high, delta) < beta:
        low, high = high, 2 * high
        if high > _EPSILON_CEILING:
            return _EPSILON_CEILING
    while high - low > 1e-6:
        middle = (low + high) / 2
        if p_value(canaries, guesses, correct, middle, delta) < beta:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class AuditResult:
    """Both bounds and how they were reached (each analysis picks its own best guess count)."""

    epsilon_lower: float  # the epsilon-delta bound (Steinke et al.)
    confidence: float
    delta: float
    canaries: int
    included: int  # canaries that were inserted
    guesses: int  # of the epsilon-delta bound's best guess count
    correct: int
    gdp_mu_lower: float = 0.0  # the f-DP analysis: not mu-GDP for any smaller mu
    fdp_epsilon_lower: float = 0.0  # that mu's epsilon at delta (a Gaussian trade-off curve assumed)
    fdp_guesses: int = 0
    fdp_correct: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.guesses if self.guesses else math.nan

    @property
    def analysis(self) -> str:
        """The analysis whose epsilon is larger: the audit's result (epsilon-delta on a tie)."""
        return GAUSSIAN_FDP if self.fdp_epsilon_lower > self.epsilon_lower else EPSILON_DELTA

    @property
    def epsilon_result(self) -> float:
        return max(self.epsilon_lower, self.fdp_epsilon_lower)


def guesses_at(scores: np.ndarray, included: np.ndarray, per_side: int) -> tuple[int, int]:
    """(guesses, right ones) when guessing "in" for the ``per_side`` highest scores and "out" for as many lowest."""
    order = np.argsort(scores, kind="stable")
    per_side = min(per_side, len(scores) // 2)
    out, into = order[:per_side], order[len(order) - per_side :]
    return 2 * per_side, int(included[into].sum() + (~included[out]).sum())


def audit_guesses(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    fractions: Sequence[float] = GUESS_FRACTIONS,
) -> AuditResult:
    """Both lower bounds from canary ``scores`` (higher: more likely included) and the truth ``included``.

    Every guess count ``max(1, round(f * m))`` per side for ``f`` in ``fractions`` is tried at ``beta /
    len(fractions)`` (Bonferroni), by each analysis; each keeps its largest bound. Ties in the scores are broken
    by position (the scores should be continuous).
    """
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    if scores.shape != included.shape or scores.ndim != 1 or len(scores) < 2:
        raise ValueError(f"scores {scores.shape} and included {included.shape}: need two equal 1-D arrays, m >= 2")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores: every canary's score must be finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence}: must be in (0, 1)")
    beta = (1 - confidence) / len(fractions)
    counts = [guesses_at(scores, included, max(1, round(fraction * len(scores)))) for fraction in fractions]
    bounds = [epsilon_lower_bound(len(scores), guesses, correct, delta, beta) for guesses, correct in counts]
    best = int(np.argmax(bounds))  # the first of equal bounds, as before
    mu, fdp_epsilon, fdp_guesses, fdp_correct = best_gaussian_bound(len(scores), counts, delta, beta)
    return AuditResult(
        bounds[best],
        confidence,
        delta,
        len(scores),
        int(included.sum()),
        *counts[best],
        gdp_mu_lower=mu,
        fdp_epsilon_lower=fdp_epsilon,
        fdp_guesses=fdp_guesses,
        fdp_correct=fdp_correct,
    )


def ceiling(canaries: int, delta: float, confidence: float = 0.95, fractions: Sequence[float] = GUESS_FRACTIONS):
    """(epsilon-delta, f-DP epsilon) an audit of ``canaries`` reports when every guess is right: its design's
    ceiling, what no mechanism, however leaky, can be shown to exceed with this design."""
    beta = (1 - confidence) / len(fractions)
    counts = [(2 * min(max(1, round(f * canaries)), canaries // 2),) * 2 for f in fractions]
    epsilon = max(epsilon_lower_bound(canaries, guesses, correct, delta, beta) for guesses, correct in counts)
    return epsilon, best_gaussian_bound(canaries, counts, delta, beta)[1]
