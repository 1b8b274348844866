"""The defense table's rows as markdown (a setting's utility cells and one leakage cell per sent round), and its
settings as points of the equal-utility table and the frontier figure.

Shared by ``bench.defenses`` (every defense at every strength) and ``bench.paper_results`` (the papers' settings).
"""

from __future__ import annotations

import numpy as np

from bench.defense_screen import SCREEN, SCREEN_OPTIONS, STAGE_LEVEL, UNSETTLED, decided
from bench.defense_setup import defense_of
from fedsim.judge.verdict import LEAKS
from fedsim.reporting import summaries
from fedsim.reporting.defense_curves import UNDEFENDED, DefensePoint
from fedsim.reporting.equal_utility import BUDGETS, DROP_TOLERANCE, StrengthPoint, equal_utility


def strength_text(label: str, row: dict) -> tuple[str, str]:
    """(defense, strength) as the table prints them: DP-SGD by the epsilon its runs spent."""
    defense, strength = defense_of(label)
    if defense == "dpsgd" and row["epsilon"] is not None:
        strength = f"epsilon spent {row['epsilon']:.3g} ({strength}, lr {row['lr']:.3g})"
    return defense, strength


def column_names(rounds: tuple[int, ...]) -> list[str]:
    """The table's columns after the setting: utility, then one leakage cell per sent round."""
    return [
        "accuracy (%)",
        "gain over the public model (points)",
        "drop (points)",
        *(f"round {r}: attacker's pick SSIM; verdict; saturated picks; picked attacks; stage" for r in rounds),
    ]


def row_cells(label: str, row: dict, rounds: tuple[int, ...]) -> list[str]:
    """A setting's cells under :func:`column_names`."""

    def estimate(value) -> str:
        return value.text(2) if value is not None else "-"

    cells = [estimate(row["accuracy"]), estimate(row["gain"]), estimate(row["drop"])]
    for r in rounds:
        cell = row["rounds"].get(r)
        cells.append(
            "-"
            if cell is None
            else f"{cell['pick_ssim']}; {cell['verdict'].text()}; {cell['saturated']}; {cell['pick_won']}; "
            + stage_text(cell)
        )
    return cells


def stage_text(cell: dict) -> str:
    """Which stage a cell's numbers come from, and whether they settle it."""
    if cell["stage"] != SCREEN:
        return cell["stage"]
    return "screen" if cell["decided"] else "screen found no leak: full strength not run yet"


COLUMNS_NOTE = (
    "Utility: the mean test accuracy of the last rounds of the federation that trains the public model (10 clients, "
    "one defended gradient of 64 images per round, a fixed number of rounds), its gain over the public model and "
    "its drop against the undefended run of the same seed (paired). Leakage, per sent round: the same federation "
    "from the model sent in that round (round 1: the public model), every client sending the defended gradient of 2 "
    "images, every client of every seed attacked, first by the screen (Inverting Gradients and the adaptive attack "
    f"of the defense in force, {SCREEN_OPTIONS['iterations']} iterations x {SCREEN_OPTIONS['restarts']} restart), "
    "then, where the screen found no leak, by `attacks: strongest` at full strength (the papers' presets and the "
    "saturation step included; `bench.defense_screen`); the attacker's pick per client (no ground truth: the "
    "adaptive attack's result, as the attacker ranks results built for the defense in force first, "
    "`adversary.ranking`) and its mean SSIM over the clients' images; the cell's verdict "
    "(`fedsim.judge.verdict.judge_cell`: how many targets beat guesses made without the update, and the binomial "
    f"test of that count, each stage at level {STAGE_LEVEL:g} so that the two together stay within 0.05); how many "
    "picks saturated (the screen never saturates: its `leaks` needs no saturation, and its SSIM is a lower bound); "
    "the attacks picked; the stage the cell's numbers come from."
)


def strength_lines(table: dict[str, dict], rounds: tuple[int, ...]) -> list[str]:
    lines = [
        "| defense | strength | " + " | ".join(column_names(rounds)) + " |",
        "| --- | --- | " + " | ".join("---" for _ in column_names(rounds)) + " |",
    ]
    for label, row in table.items():
        defense, strength = strength_text(label, row)
        lines.append(f"| {defense} | {strength} | " + " | ".join(row_cells(label, row, rounds)) + " |")
    return lines


def worst_round(row: dict) -> dict | None:
    """The sent round at which the attacker's pick scored highest: what the setting's leakage is judged by."""
    cells = [cell for cell in row["rounds"].values() if cell["pick_value"] == cell["pick_value"]]
    return max(cells, key=lambda cell: cell["pick_value"], default=None)


def equal_utility_points(table: dict[str, dict], rounds: tuple[int, ...]) -> list[StrengthPoint]:
    """Each defended setting with utility and leakage measured, judged at its worst sent round; a setting not
    :func:`decided` yet has the verdict ``UNSETTLED``."""
    points = []
    for label, row in table.items():
        worst = worst_round(row)
        if label == "none" or row["drop"] is None or worst is None or worst["floor_value"] is None:
            continue
        defense, strength = strength_text(label, row)
        leaking = any(cell["verdict"].verdict == LEAKS for cell in row["rounds"].values())
        verdict = (LEAKS if leaking else worst["verdict"].verdict) if decided(row, rounds) else UNSETTLED
        points.append(
            StrengthPoint(
                defense=defense,
                setting=strength,
                drop=row["drop"].value,
                leakage=worst["pick_value"],
                # the screen's pick is a lower bound on what full strength reaches
                leakage_text=(">= " if worst["stage"] == SCREEN else "") + worst["pick_ssim"],
                floor=worst["floor_value"],
                verdict=verdict,
            )
        )
    return points


def equal_utility_cells(points: list[StrengthPoint]) -> dict[str, dict[float, StrengthPoint | None]]:
    """Per defense and budget, the settled strength of lowest leakage within the budget
    (``fedsim.reporting.equal_utility``), unless a strength within it is ``UNSETTLED``: then the strongest such
    one, since what the defense reaches at that cost is not known until it is attacked at full strength."""
    cells = equal_utility([p for p in points if p.verdict != UNSETTLED], BUDGETS)
    for point in points:
        if point.verdict != UNSETTLED:
            continue
        for budget in BUDGETS:
            current = cells.setdefault(point.defense, {}).get(budget)
            within = point.drop <= budget + DROP_TOLERANCE
            if within and (current is None or current.verdict != UNSETTLED or point.drop > current.drop):
                cells[point.defense][budget] = point
    return cells


def curve_points(table: dict[str, dict], rounds: tuple[int, ...]) -> list[DefensePoint]:
    """Each :func:`decided` setting whose worst round was attacked at full strength, as a point of
    ``fedsim.reporting.defense_curves``: drop over seeds, worst round's leakage."""
    points = []
    for label, row in table.items():
        defense, strength = strength_text(label, row)
        worst, undefended = worst_round(row), label == "none"
        if worst is None or (row["drop"] is None and not undefended) or not decided(row, rounds):
            continue
        if worst["stage"] == SCREEN:  # the figure plots the strongest attack's SSIM; the screen's is a lower bound
            continue
        points.append(
            DefensePoint(
                curve=UNDEFENDED if undefended else defense,
                setting=UNDEFENDED if undefended else strength,
                runs=(),
                drop=summaries.Estimate(0.0, np.nan, np.nan) if undefended else row["drop"],
                leakage=summaries.Estimate(worst["pick_value"], np.nan, np.nan),
                floor=np.nan if worst["floor_value"] is None else worst["floor_value"],
                verdict=worst["verdict"].verdict,
            )
        )
    return points
