"""Andrew et al.'s one-shot estimate of client-level epsilon (ICLR 2024, "One-shot Empirical Privacy Estimation
for Federated Learning"), from the same canary clients' cosines the audit scores.

Canary client j sends a random unit direction ``u_j`` (scaled to the clipping norm); the score of each canary
is the cosine of the model's change with ``u_j``. The cosines of the canaries that were not inserted are the
null (close to N(0, 1/d) in d dimensions); those of the inserted ones are shifted by what the release reveals
of them. Fitting a Gaussian to each, ``mu = (mean_in - mean_out) / std_in`` is the separation of a Gaussian
mechanism that distinguishes a canary's presence as well as these cosines do, and the estimate is that
mechanism's epsilon at delta (mu-GDP's privacy profile, ``fdp.gdp_epsilon``).

An *estimate*, not a bound: it carries no confidence and holds only as far as the cosines are Gaussian; it
sits beside the audit's lower bounds, never in their place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adversary.privacy_audit.fdp import gdp_epsilon


@dataclass(frozen=True)
class OneShotEstimate:
    """The Gaussian fits and the epsilon they give."""

    epsilon: float
    mu: float
    mean_in: float
    mean_out: float
    std_in: float


def one_shot_estimate(
    cosines: Sequence[float] | np.ndarray, included: Sequence[bool] | np.ndarray, delta: float
) -> OneShotEstimate:
    """The estimate from every canary's cosine and whether it was inserted (0 when the inserted canaries' cosines
    are not above the null's on average: nothing revealed)."""
    cosines, included = np.asarray(cosines, dtype=np.float64), np.asarray(included, dtype=bool)
    if cosines.shape != included.shape or cosines.ndim != 1:
        raise ValueError(f"cosines {cosines.shape} and included {included.shape}: need two equal 1-D arrays")
    if included.sum() < 2 or (~included).sum() < 1:
        raise ValueError(f"{included.sum()} inserted, {(~included).sum()} not: need two inserted canaries and a null")
    inside, outside = cosines[included], cosines[~included]
    mean_in, mean_out, std_in = float(inside.mean()), float(outside.mean()), float(inside.std(ddof=1))
    mu = max((mean_in - mean_out) / std_in, 0.0) if std_in > 0 else (np.inf if mean_in > mean_out else 0.0)
    epsilon = gdp_epsilon(mu, delta) if np.isfinite(mu) else np.inf
    return OneShotEstimate(epsilon, float(mu), mean_in, mean_out, std_in)
