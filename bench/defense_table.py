"""The defense table's rows as markdown: a setting's utility cells and one leakage cell per sent round.

Shared by ``bench.defenses`` (every defense at every strength) and ``bench.paper_results`` (the papers' settings).
"""

from __future__ import annotations

from bench.defense_setup import defense_of


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
        *(f"round {r}: attacker's pick SSIM; verdict; saturated picks; picked attacks" for r in rounds),
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
            else f"{cell['pick_ssim']}; {cell['verdict'].text()}; {cell['saturated']}; {cell['pick_won']}"
        )
    return cells


COLUMNS_NOTE = (
    "Utility: the mean test accuracy of the last rounds of the federation that trains the public model (10 clients, "
    "one defended gradient of 64 images per round, a fixed number of rounds), its gain over the public model and "
    "its drop against the undefended run of the same seed (paired). Leakage, per sent round: the same federation "
    "from the model sent in that round (round 1: the public model), every client sending the defended gradient of 2 "
    "images, every client of every seed attacked by `attacks: strongest`; the attacker's pick per client (the "
    "result of lowest gradient match: no ground truth) and its mean SSIM over the clients' images; the cell's "
    "verdict (`fedsim.judge.verdict.judge_cell`: how many targets beat guesses made without the update, and the "
    "binomial test of that count against the test's level); how many picks saturated; the attacks picked."
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
