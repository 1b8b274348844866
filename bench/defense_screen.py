"""The leakage phase's screen: every cell is attacked first on a small budget, and only the cells the screen does
not call ``leaks`` go on to ``attacks: strongest`` at full strength.

Why a screen: at full strength (every applicable attack, the papers' presets at their own budgets, then the
saturation step) one cell of 30 two-image MNIST targets costs hours of CPU (``docs/results/defenses.md``), and
most cells leak. A ``leaks`` verdict holds whatever the budget: the test compares the attacker's own pick, chosen
without the truth, with guesses made without the update, so a weak attack that beats them is evidence enough. A
cell the screen does not call ``leaks`` shows nothing about protection, so it is attacked again at full strength.

Each cell can thus be tested twice. Both tests run at half the stated level (``STAGE_LEVEL``, Bonferroni), both
per target (``adversary.floor.level``) and for the cell's count (``judge_cell``), so a cell with nothing to leak
is called ``leaks`` by either stage at most ``FLOOR_LEVEL`` of the time.

The screen: Inverting Gradients and the adaptive attack of each defense in force (tuned on public images of the
setting, as at full strength), ``SCREEN_OPTIONS`` each, no saturation; the attacker's pick between them is the
one of lower gradient match, as everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adversary.registry import ATTACKS
from fedsim.judge.floor import FLOOR_LEVEL
from fedsim.judge.verdict import LEAKS

SCREEN_FOLDER = "screen"  # under bench.defenses' --out; the full-strength runs are under "sent"
FULL_FOLDER = "sent"
#: each stage's false-positive rate: the two together stay within the stated level
STAGE_LEVEL = FLOOR_LEVEL / 2
#: the verdict of a setting whose cells the screen did not call ``leaks`` and full strength has not attacked yet
UNSETTLED = "unsettled: full strength not run yet"
SCREEN_OPTIONS = {"iterations": 500, "restarts": 1}
SCREEN, FULL = "screen", "full strength"  # the stage a cell's numbers come from


def adaptive_attacks(defenses: Sequence[Mapping]) -> list[str]:
    """The registered attacks that adapt to a defense of ``defenses`` (their defaults, no presets)."""
    names = {defense["name"] for defense in defenses}
    return [name for name in ATTACKS.names() if names & set(ATTACKS.options(name).adapts_to)]


def screen_attacks(defenses: Sequence[Mapping]) -> list[dict]:
    """The screen's attacks for a setting whose clients run ``defenses``."""
    return [{"name": name, **SCREEN_OPTIONS} for name in ("ig", *adaptive_attacks(defenses))]


def full_strength_rounds(screen_cells: Mapping[int, Mapping], rounds: Sequence[int], seeds: int) -> list[int]:
    """The sent rounds whose screen has finished on every seed without calling the cell ``leaks``: what the
    full-strength portfolio still has to attack."""
    wanted = []
    for sent_round in rounds:
        cell = screen_cells.get(sent_round)
        if cell is not None and cell["seeds"] >= seeds and cell["verdict"].verdict != LEAKS:
            wanted.append(sent_round)
    return wanted


def decided_cell(screen: Mapping | None, full: Mapping | None) -> dict | None:
    """The cell a sent round is judged by: the full-strength one where it ran on every seed the screen did, else
    the screen's when it leaks, else the screen's marked as awaiting full strength (its verdict decides nothing
    about protection)."""
    if full is not None and (screen is None or full["seeds"] >= screen["seeds"]):
        return {**full, "stage": FULL, "decided": True}
    if screen is None:
        return None
    return {**screen, "stage": SCREEN, "decided": screen["verdict"].verdict == LEAKS}


def decided(row: dict, rounds: tuple[int, ...]) -> bool:
    """Whether a setting's leakage is settled: a cell leaks, or every sent round it has was attacked at full
    strength (a screen that found no leak settles nothing)."""
    cells = row["rounds"].values()
    if any(cell["verdict"].verdict == LEAKS for cell in cells):
        return True
    expected = len(rounds) if row["seeds"] else 1  # settings without a utility run: round 1 only
    return len(cells) >= expected and all(cell["decided"] for cell in cells)


def undecided(table: dict[str, dict], rounds: tuple[int, ...]) -> list[str]:
    """Settings with leakage cells that are not :func:`decided` yet."""
    return [label for label, row in table.items() if row["rounds"] and not decided(row, rounds)]
