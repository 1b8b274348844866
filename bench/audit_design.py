"""Canary designs on the idealised Gaussian mechanism, where the true epsilon is known exactly.

Canary j is included with probability 1/2 and the auditor sees one score ``N(mu * norm * included_j, 1)``:
a Gaussian mechanism of sensitivity 1 per canary (mu-GDP for each), no training, pure numpy. ``norm`` is the
canary's norm as a fraction of the mechanism's sensitivity (1: the worst case the mechanism must hide). Its
true epsilon at delta is mu-GDP's (``adversary.privacy_audit.fdp.gdp_epsilon``). Each design (canaries, guess counts,
norm) is audited as a run is (``adversary.privacy_audit.bound.audit_guesses``: both analyses, Bonferroni over the guess
counts), over seeds, beside its ceiling: what the design reports when every guess is right.

    nice -n 15 .venv/bin/python -m bench.audit_design [--seeds 5]      (the same as bench.audit --ideal)

``separation_mu``: the score separation of a run's canaries, (mean of the included - mean of the others) / the
pooled standard deviation, the mu that Gaussian scores of that separation would have: a white-box audit cannot
show more than its scores separate.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from adversary.privacy_audit.bound import GUESS_FRACTIONS, audit_guesses, ceiling
from adversary.privacy_audit.fdp import gdp_epsilon
from bench.common import format_interval, interval

EPSILONS, DELTA = (1.0, 4.0, 8.0), 1e-5  # as bench.audit's table


@dataclass(frozen=True)
class Design:
    label: str
    canaries: int
    fractions: tuple[float, ...] = GUESS_FRACTIONS
    norm: float = 1.0  # canary norm / the mechanism's sensitivity


#: the bench's DP-SGD white-box canaries first, then one change at a time
DESIGNS = (
    Design("as DP-SGD's white-box audit", 5000),
    Design("1,000 canaries", 1000),
    Design("20,000 canaries", 20000),
    Design("all guesses, no split", 5000, (0.5,)),
    Design("few guesses", 5000, (0.05, 0.02, 0.01, 0.005)),
    Design("20,000 canaries, few guesses", 20000, (0.05, 0.02, 0.01, 0.005)),
    Design("canary norm half the sensitivity", 5000, norm=0.5),
)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism whose epsilon at ``delta`` is ``epsilon``."""
    return float(optimize.brentq(lambda mu: gdp_epsilon(mu, delta) - epsilon, 1e-6, 50.0, xtol=1e-12))


def gaussian_scores(mu: float, canaries: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(scores, included) of one run of the idealised mechanism."""
    included = rng.random(canaries) < 0.5
    return mu * included + rng.standard_normal(canaries), included


def separation_mu(scores: Sequence[float] | np.ndarray, included: Sequence[bool] | np.ndarray) -> float:
    """(mean in - mean out) / pooled standard deviation of a run's canary scores."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    inside, outside = scores[included], scores[~included]
    pooled = np.sqrt(
        (inside.var(ddof=1) * (len(inside) - 1) + outside.var(ddof=1) * (len(outside) - 1)) / (len(scores) - 2)
    )
    return float((inside.mean() - outside.mean()) / pooled)


def audit_design(
    design: Design, epsilon: float, delta: float, seeds: int, mu: float | None = None
) -> dict[str, object]:
    """One design at one true epsilon (or of the mechanism with that ``mu``): both bounds per seed, and the
    design's ceilings."""
    if mu is None:
        mu = gdp_mu(epsilon, delta)
    else:
        epsilon = gdp_epsilon(mu, delta)
    runs = []
    for seed in range(seeds):
        scores, included = gaussian_scores(mu * design.norm, design.canaries, np.random.default_rng(seed))
        result = audit_guesses(scores, included, delta=delta, fractions=design.fractions)
        runs.append({"epsilon_delta": result.epsilon_lower, "fdp": result.fdp_epsilon_lower})
    epsilon_delta_ceiling, fdp_ceiling = ceiling(design.canaries, delta, fractions=design.fractions)
    return {
        "design": design.label,
        "canaries": design.canaries,
        "fractions": design.fractions,
        "norm": design.norm,
        "true_epsilon": epsilon,
        "mu": mu,
        "runs": runs,
        "ceiling_epsilon_delta": epsilon_delta_ceiling,
        "ceiling_fdp": fdp_ceiling,
    }


def ideal_lines(seeds: int, epsilons: Sequence[float] = EPSILONS, delta: float = DELTA) -> list[str]:
    """Every design at each of ``epsilons``, on the idealised mechanism, as a markdown table (rows printed as done)."""
    lines = [
        f"Idealised Gaussian mechanism (`--ideal`, {seeds} seeds, delta {delta:g}, 95 % confidence): mean [95 % "
        "bootstrap interval]; ceiling: the bound when every guess is right (epsilon-delta / f-DP).",
        "",
        "| design | canaries | guesses per side (fraction of m) | canary norm / sensitivity | true epsilon | "
        "epsilon-delta bound | f-DP bound | ceiling |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for design in DESIGNS:
        for epsilon in epsilons:
            row = audit_design(design, epsilon, delta, seeds)
            bounds = {key: interval([run[key] for run in row["runs"]]) for key in ("epsilon_delta", "fdp")}
            lines.append(
                f"| {design.label} | {design.canaries:,} | {', '.join(f'{f:g}' for f in design.fractions)} | "
                f"{design.norm:g} | {epsilon:g} | {format_interval(bounds['epsilon_delta'], 2)} | "
                f"{format_interval(bounds['fdp'], 2)} | {row['ceiling_epsilon_delta']:.2f} / {row['ceiling_fdp']:.2f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="runs of the mechanism per design and epsilon")
    args = parser.parse_args(argv)
    print("\n".join(ideal_lines(args.seeds)))


if __name__ == "__main__":
    main()
