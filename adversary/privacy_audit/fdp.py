"""The f-DP analysis of a one-run audit, for Gaussian DP (Mahloujifar, Melis and Chaudhuri, "Auditing
f-Differential Privacy in One Run", 2024), on the same guesses as ``bound``.

Setting as in ``bound``: m canaries, each included with probability 1/2; ``guesses`` of them guessed (the rest
abstained on), ``correct`` of those right. Under an f-DP mechanism the paper bounds the probability ``tau`` of
``correct`` or more right guesses by a recursion over the number of right guesses i = c, c - 1, ..., 0 (their
analysis of guessing games with abstention, run as the authors' code runs it, ``audit_rh_with_cap`` in
Meta's PrivacyGuard):

* start from ``r_c = tau c / m`` (right guesses) and ``h_c = tau (k - c) / m`` (wrong ones), k = ``guesses``;
* step down: ``h_i = max(h_{i+1}, g(r_{i+1}))`` with ``g`` the inverse blow-up of the trade-off function (the
  least probability the neighbouring input gives an event of probability x), and
  ``r_i = min(r_{i+1} + i / (k - i) (h_i - h_{i+1}), 1)``;
* f-DP forces ``r_0 + h_0 <= k / m``. If it fails at ``tau = beta``, seeing ``correct`` right guesses has
  probability below ``beta`` under f-DP: the mechanism is not f-DP, at confidence ``1 - beta``.

For mu-GDP, ``f(x) = Phi(Phi^-1(1 - x) - mu)`` and ``g(x) = Phi(Phi^-1(x) - mu)``. A larger mu lowers ``g`` and
so the left side: the rejected mu form an interval [0, mu*), and mu* is the bound, found on a grid (vectorised
over the grid points and the guess counts). It is turned into epsilon at the run's delta by mu-GDP's exact
privacy profile ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Dong, Roth and Su 2019).

What it proves: the mechanism is not mu-GDP for any mu below the bound. The epsilon is the one a Gaussian
mechanism with that mu has at delta: a lower bound on the mechanism's epsilon when its trade-off curve is
Gaussian (DP-SGD's is close to one by the central limit theorem, not exactly), unlike ``bound``'s, which assumes
nothing about the curve's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, special

#: far above any audit here: 10^5 canaries, all guessed right, reject mu-GDP only up to mu = 2.65 (at 99.8 %)
MU_CEILING = 20.0
_GRID = 65  # points per refinement of the bracket around mu*


def gaussian_inverse_blow_up(x: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """The least probability mu-GDP lets the neighbouring input give an event of probability ``x``."""
    return special.ndtr(special.ndtri(x) - mu)


def excess(mu, canaries: int, guesses, correct, beta: float) -> np.ndarray:
    """``r_0 + h_0 - k / m`` of the recursion started at ``tau = beta`` (positive: mu-GDP rejected at ``beta``).

    ``mu``, ``guesses`` and ``correct`` broadcast together: every combination runs the recursion at once.
    """
    mu, k, c = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mu, guesses, correct)))
    r, h = beta * c / canaries, beta * (k - c) / canaries
    settled = c == 0  # once h stops growing, neither h nor r changes again
    for i in range(int(c.max(initial=0)) - 1, -1, -1):
        started = i < c
        grown = np.where(started, np.maximum(h, gaussian_inverse_blow_up(r, mu)), h)
        changed = grown > h
        r = np.where(changed, np.minimum(r + i / np.maximum(k - i, 1) * (grown - h), 1.0), r)
        settled |= started & ~changed
        h = grown
        if settled.all():
            break
    return r + h - k / canaries


def mu_lower_bounds(canaries: int, guesses, correct, beta: float, tolerance: float = 1e-6) -> np.ndarray:
    """For each (``guesses``, ``correct``): the largest mu whose mu-GDP the guesses reject at ``beta`` (0: none).

    The bracket [low, high) (low rejected, high not) is cut into a grid and narrowed to the first grid point that
    is not rejected, until it is ``tolerance`` wide; the bound is its lower end, so it never overshoots.
    """
    if not 0 < beta < 1:
        raise ValueError(f"beta = {beta}: must be in (0, 1) (1 - the confidence)")
    k, c = np.atleast_1d(np.asarray(guesses)), np.atleast_1d(np.asarray(correct))
    if k.shape != c.shape or np.any((c < 0) | (c > k) | (k > canaries)):
        raise ValueError(f"correct = {c}, guesses = {k}, canaries = {canaries}: need 0 <= c <= g <= m")
    low, high = np.zeros(k.shape), np.full(k.shape, MU_CEILING)
    rejected_at_zero = excess(low, canaries, k, c, beta) > 0
    at_ceiling = excess(high, canaries, k, c, beta) > 0
    open_ = rejected_at_zero & ~at_ceiling
    steps = np.linspace(0.0, 1.0, _GRID)
    while open_.any() and np.max((high - low)[open_]) > tolerance:
        grid = low[:, None] + (high - low)[:, None] * steps  # (counts, grid)
        rejected = excess(grid, canaries, k[:, None], c[:, None], beta) > 0
        rejected[:, 0] = True  # low is rejected by construction
        first_kept = np.argmin(rejected, axis=1)  # first grid point not rejected (the last one never is)
        rows = np.arange(len(k))
        low = np.where(open_, grid[rows, first_kept - 1], low)
        high = np.where(open_, grid[rows, first_kept], high)
    return np.where(at_ceiling, MU_CEILING, np.where(rejected_at_zero, low, 0.0))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-GDP (Dong, Roth and Su 2019, Corollary 2.13), the exponent kept in log space."""
    if mu <= 0:
        return 0.0
    first = special.ndtr(-epsilon / mu + mu / 2)
    second = math.exp(epsilon + special.log_ndtr(-epsilon / mu - mu / 2))
    return max(float(first - second), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of mu-GDP at ``delta``: where its privacy profile crosses ``delta`` (0 if it starts below)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta = {delta}: must be in (0, 1)")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    high = 1.0
    while gdp_delta(mu, high) > delta:
        high *= 2
    return float(optimize.brentq(lambda eps: gdp_delta(mu, eps) - delta, 0.0, high, xtol=1e-9))


def best_gaussian_bound(
    canaries: int, counts: Sequence[tuple[int, int]], delta: float, beta: float
) -> tuple[float, float, int, int]:
    """(mu bound, its epsilon at ``delta``, guesses, correct) of the count that rejects the largest mu.

    ``beta`` is the level of each count (the caller splits its confidence over the counts, as ``bound`` does).
    At ``delta = 0`` the epsilon is 0: no Gaussian curve is (eps, 0)-DP, so rejecting one says nothing of pure DP.
    """
    guesses, correct = (np.array(column) for column in zip(*counts, strict=True))
    bounds = mu_lower_bounds(canaries, guesses, correct, beta)
    best = int(np.argmax(bounds))
    mu = float(bounds[best])
    return mu, gdp_epsilon(mu, delta) if delta > 0 else 0.0, int(guesses[best]), int(correct[best])
