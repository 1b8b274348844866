"""Each defense over its strengths: one privacy-utility curve per defense with intervals over seeds, and paper
001's equal-utility table (``fedsim.reporting.equal_utility``) from the same points.

A strength sweep runs each defense at several settings and seeds. Runs that differ only in their seed are
replicates of one **point**; the points of one defense (the same defense names, every other setting equal) make
one **curve**. A point's accuracy drop (points of test accuracy at each run's last round, which is its plateau
where ``federation.plateau`` stopped it, against the undefended run of the same seed:
``fedsim.reporting.frontier``) and its leakage (each run's strongest attack by SSIM, an oracle over the attacks)
are means over the replicates with 95 % bootstrap intervals (``fedsim.reporting.summaries``: one value per seed,
the seeds resampled). Its floor is the mean SSIM floor of those strongest results (what a guess from public data
reaches on the same images), its verdict ``leaks`` when the targets of all its replicates, each judged by the
attacker's pick, leak more often than guesses would at the level (``fedsim.judge.verdict.judge_cell``).

Runs whose model never learned are kept off the curves and the table (``fedsim.reporting.chance``), as off the
frontier.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from fedsim.reporting import summaries
from fedsim.reporting.equal_utility import StrengthPoint
from fedsim.reporting.frontier import UTILITY_LOSS
from fedsim.reporting.summaries import Estimate
from fedsim.reporting.tables import defense_settings, parameter_text, run_cell
from fedsim.rundir.reader import Run

UNDEFENDED = "none"
#: grid keys that make runs replicates (seed) or points of a curve (the defenses): not part of a curve's context
_POINT_KEYS = ("seed", "client.defenses", "strategy.dp")


@dataclass(frozen=True)
class DefensePoint:
    """One defense at one strength, over its seeds (the runs ``runs``)."""

    curve: str  # the defense, with the sweep's other settings where several exist ("noise", "noise (clients=8)")
    setting: str  # its parameters ("sigma=0.01"); "none" for the undefended point
    runs: tuple[str, ...]
    drop: Estimate  # accuracy drop in points against the undefended run of the same seed
    leakage: Estimate  # the strongest attack's SSIM
    floor: float  # mean SSIM floor of the strongest results (NaN: none recorded)
    verdict: str  # leaks / at floor / unknown

    @property
    def undefended(self) -> bool:
        return self.setting == UNDEFENDED

    def strength_point(self) -> StrengthPoint:
        """The point as a row of the equal-utility table."""
        return StrengthPoint(
            defense=self.curve,
            setting=self.setting,
            drop=self.drop.value,
            leakage=self.leakage.value,
            leakage_text=self.leakage.text(3),
            floor=self.floor,
            verdict=self.verdict,
        )


def _context(run: Run) -> tuple[str, str]:
    """What sets the run's curve apart from another's: its config less the seed, the defenses and the output (a
    key), and in words its grid labels other than those (empty outside a sweep)."""
    dumped = run.config.model_dump(mode="json", exclude={"output", "name", "seed"})
    dumped["client"].pop("defenses", None)
    dumped["strategy"].pop("dp", None)
    label = ", ".join(
        f"{key.rsplit('.', 1)[-1]}={value}" for key, value in run.labels.items() if key not in _POINT_KEYS
    )
    return repr(dumped), label


def _strongest_floor(attacks: pd.DataFrame) -> float:
    """The SSIM floor of the run's strongest result (highest SSIM); NaN where it has none."""
    scored = attacks.dropna(subset=["ssim"])
    if scored.empty or "floor_ssim" not in scored:
        return math.nan
    return float(scored.loc[scored["ssim"].idxmax(), "floor_ssim"])


def _points_verdict(attacks: pd.DataFrame, names: list[str]) -> str:
    """A point's verdict: the targets of all its runs (seeds) as one cell (``fedsim.judge.verdict.judge_cell``)."""
    own = attacks[attacks["run"].isin(names)] if "run" in attacks else attacks.iloc[0:0]
    return run_cell(own).verdict


def defense_points(runs: Mapping[str, Run], frontier: pd.DataFrame, attacks: pd.DataFrame) -> list[DefensePoint]:
    """The points of every curve, undefended ones included, in the order their first run appears in ``runs``.

    ``frontier``: ``fedsim.reporting.frontier.frontier_table`` of these runs (their ``best_ssim``, accuracy drop,
    verdict and ``never_learned``); ``attacks``: ``fedsim.reporting.tables.attack_results``. A run without an
    undefended counterpart or without a scored attack adds nothing."""
    by_run = frontier.set_index("run")
    groups: dict[tuple[str, str, str], list[str]] = {}
    labels: dict[str, str] = {}  # context -> its words
    for name, run in runs.items():
        if name not in by_run.index:
            continue
        row = by_run.loc[name]
        if bool(row.get("never_learned", False)) or pd.isna(row[UTILITY_LOSS]) or pd.isna(row["best_ssim"]):
            continue
        settings = defense_settings(run.config)
        family = " + ".join(defense for defense, _ in settings) or UNDEFENDED
        setting = "; ".join(parameter_text(params) for _, params in settings) or UNDEFENDED
        context, labels[context] = _context(run)
        groups.setdefault((family, context, setting), []).append(name)
    contexts = list(dict.fromkeys(context for _, context, _ in groups))
    several_contexts = len(contexts) > 1
    points = []
    for (family, context, setting), names in groups.items():
        own = by_run.loc[names]
        floors = [_strongest_floor(attacks[attacks["run"] == name]) for name in names]
        known = [value for value in floors if not math.isnan(value)]
        points.append(
            DefensePoint(
                curve=(
                    f"{family} ({labels[context] or f'setting {contexts.index(context) + 1}'})"
                    if several_contexts
                    else family
                ),
                setting=setting,
                runs=tuple(names),
                drop=summaries.mean([[100 * float(v) for v in own[UTILITY_LOSS]]]),
                leakage=summaries.mean([[float(v) for v in own["best_ssim"]]]),
                floor=sum(known) / len(known) if known else math.nan,
                verdict=_points_verdict(attacks, names),
            )
        )
    return points


def curves(points: list[DefensePoint]) -> dict[str, list[DefensePoint]]:
    """The defended points per curve, cheapest first; only defenses tried at two or more strengths make a curve."""
    by_curve: dict[str, list[DefensePoint]] = {}
    for point in points:
        if not point.undefended:
            by_curve.setdefault(point.curve, []).append(point)
    return {
        curve: sorted(members, key=lambda p: p.drop.value) for curve, members in by_curve.items() if len(members) > 1
    }


def points_frame(points: list[DefensePoint]) -> pd.DataFrame:
    """The points as the report's table: one row per defense and strength."""
    return pd.DataFrame(
        [
            {
                "defense": point.curve,
                "setting": point.setting,
                "seeds": len(point.runs),
                "accuracy_drop_points": point.drop.text(2),
                "strongest_ssim": point.leakage.text(3),
                "floor_ssim": None if math.isnan(point.floor) else round(point.floor, 3),
                "verdict": point.verdict,
            }
            for point in points
        ],
        columns=["defense", "setting", "seeds", "accuracy_drop_points", "strongest_ssim", "floor_ssim", "verdict"],
    )
