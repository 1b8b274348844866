"""Defenses compared at equal utility: the table of "Data Reconstruction Attacks and Defenses: A Systematic
Evaluation" (paper 001).

Each defense is run at several strengths; each strength is one point: its accuracy drop against the undefended
model (points of test accuracy at the plateau, paired by seed), the leakage of the strongest attack against it
and that leakage's floor and verdict. For an accuracy budget (a drop of at most 1, 3 or 10 points), a defense's
cell is its point of lowest leakage among those whose mean drop stays within the budget, or "none at this cost"
when every strength it was tried at costs more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: accuracy-drop budgets (points of test accuracy) of the table's columns
BUDGETS = (1.0, 3.0, 10.0)
NONE_AT_THIS_COST = "none at this cost"
#: accuracies are fractions of test images: 0.80 - 0.79 is 1.0000000000000009 points, which is within 1
DROP_TOLERANCE = 1e-9


@dataclass(frozen=True)
class StrengthPoint:
    """One defense at one strength, over its seeds."""

    defense: str  # the defense (the table's row)
    setting: str  # its strength, as the table prints it (e.g. "sigma 0.01")
    drop: float  # mean accuracy drop against the undefended run of the same seed, in points
    leakage: float  # the strongest attack's mean SSIM
    leakage_text: str  # the same with its interval, as printed
    floor: float  # the SSIM floor of those reconstructions (what a guess from public data reaches)
    verdict: str  # leaks / at floor / unknown


def equal_utility(
    points: Iterable[StrengthPoint], budgets: Sequence[float] = BUDGETS
) -> dict[str, dict[float, StrengthPoint | None]]:
    """Per defense and budget, its point of lowest leakage whose drop is at most the budget (None: none is).

    A tie in leakage goes to the cheaper point. Defenses keep the order of their first point."""
    by_defense: dict[str, list[StrengthPoint]] = {}
    for point in points:
        by_defense.setdefault(point.defense, []).append(point)
    return {
        defense: {
            budget: min(
                (p for p in candidates if p.drop <= budget + DROP_TOLERANCE),
                key=lambda p: (p.leakage, p.drop),
                default=None,
            )
            for budget in budgets
        }
        for defense, candidates in by_defense.items()
    }


def cell_text(point: StrengthPoint | None) -> str:
    """A table cell: leakage, floor and verdict at the chosen strength, or "none at this cost"."""
    if point is None:
        return NONE_AT_THIS_COST
    floor = "no floor recorded" if math.isnan(point.floor) else f"floor {point.floor:.3f}"
    return f"{point.leakage_text} ({floor}, {point.verdict}; {point.setting}, drop {point.drop:.1f})"


def equal_utility_markdown(
    table: Mapping[str, Mapping[float, StrengthPoint | None]], budgets: Sequence[float] = BUDGETS
) -> list[str]:
    """The table as markdown lines: one row per defense, one column per accuracy-drop budget."""
    header = "| defense | " + " | ".join(f"drop <= {budget:g} points" for budget in budgets) + " |"
    lines = [header, "| --- | " + " | ".join("---" for _ in budgets) + " |"]
    for defense, cells in table.items():
        lines.append(f"| {defense} | " + " | ".join(cell_text(cells.get(budget)) for budget in budgets) + " |")
    return lines
