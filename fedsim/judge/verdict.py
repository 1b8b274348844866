"""Verdicts above one attack row: per target (which reconstruction decides) and per cell (how many targets leak).

**Per target.** Several attacks on one target give several reconstructions. The verdict is read from the one the
attacker itself would report, picked without the truth as the attacker ranks its results (``adversary.ranking``):
those of attacks built for a defense in force first, then the lowest ``gradient_match`` (1 - cosine between the
update the reconstruction would produce and the observed one). Under the null (an update that tells nothing about
the images) that pick is independent of the images, so its row's single-guess p-value (``fedsim.judge.floor``) holds.
Where no result carries that yardstick, the pick is the lowest p-value, corrected for the selection over the ``N``
results (``1 - (1 - p)^N`` per guess family), which keeps the level too.

The best result by SSIM against the truth, which no attacker has, is reported beside it as an upper bound: the
*oracle*, tested against the best of ``N`` guesses (``oracle_p_value``); it never decides a verdict.

**Per cell** (a defense at one strength, a round, the aggregate of a sweep...): ``k`` of ``n`` targets leak, with a
95 % Clopper-Pearson interval on the share, and the cell ``leaks`` when ``k`` is significantly above what the
targets' level lets guesses reach (one-sided binomial test against the level). A cell of fewer than
``MIN_TARGETS`` targets is marked underpowered.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from adversary.ranking import row_rank
from fedsim.judge.floor import AT_FLOOR, FLOOR_LEVEL, LEAKS, UNKNOWN, significant

MIN_TARGETS = 30  # targets per published cell for the binomial test to have power against a few leaking targets
ATTACKER_PICK = "attacker's pick"  # adversary.ranking: defense-modelling attacks first, then lowest gradient match
CORRECTED_PICK = "best p-value, corrected for the selection"  # no attacker-side yardstick recorded
ONLY_ATTACK = "one attack"

Row = Mapping[str, Any]


@dataclass(frozen=True)
class TargetVerdict:
    """One target's verdict (from the attacker's pick) and the oracle's upper bound beside it."""

    pick: Row
    selection: str  # how the pick was made: ATTACKER_PICK, CORRECTED_PICK or ONLY_ATTACK
    candidates: int  # scored results on the target
    p_value: float | None
    floor: float | None  # the pick's SSIM critical value
    verdict: str
    oracle: Row  # the best result by SSIM against the truth
    oracle_p_value: float | None
    oracle_floor: float | None
    oracle_verdict: str

    @property
    def ssim(self) -> float:
        return float(self.pick["ssim_mean"])

    @property
    def oracle_ssim(self) -> float:
        return float(self.oracle["ssim_mean"])

    def to_row(self) -> dict[str, Any]:
        """The flat fields a table shows: the pick's attack, SSIM, floor, p-value, verdict; the oracle's beside."""
        return {
            "attack": self.pick.get("attack"),
            "ssim_mean": self.ssim,
            "psnr_mean": self.pick.get("psnr_mean"),
            "floor_ssim": self.floor,
            "p_value": self.p_value,
            "verdict": self.verdict,
            "selection": self.selection,
            "selected_over": self.candidates,
            "oracle_attack": self.oracle.get("attack"),
            "oracle_ssim": self.oracle_ssim,
            "oracle_floor_ssim": self.oracle_floor,
            "oracle_p_value": self.oracle_p_value,
            "oracle_verdict": self.oracle_verdict,
        }


def _level(row: Row) -> float:
    level = row.get("floor_level")
    return float(level) if _finite(level) else FLOOR_LEVEL


def _verdict(p_value: float | None, level: float) -> str:
    if p_value is None:
        return UNKNOWN
    return LEAKS if significant(p_value, level) else AT_FLOOR


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


def scored(rows: Iterable[Row], score: str = "ssim_mean") -> list[Row]:
    """The rows of scored results: attack rows with status ``ok`` and a finite ``score``."""
    return [
        row
        for row in rows
        if row.get("event", "attack") == "attack" and row.get("status", "ok") == "ok" and _finite(row.get(score))
    ]


def judge_target(rows: Iterable[Row], score: str = "ssim_mean") -> TargetVerdict | None:
    """The verdict of one target from the scored results on it (rows of one round and target; None: none scored).
    ``score``: the column holding each result's mean SSIM (``ssim`` in the report's tables).

    Rows recorded before calibrated verdicts (no ``p_value``) give ``unknown``: their floor was no test.
    """
    results = [{**row, "ssim_mean": row[score]} for row in scored(rows, score)]
    if not results:
        return None
    count = len(results)
    yardstick = [row for row in results if _finite(row.get("gradient_match"))]
    if count == 1:
        pick, selection, p_value = results[0], ONLY_ATTACK, results[0].get("p_value")
        floor = pick.get("floor_ssim")
    elif yardstick:
        pick = min(yardstick, key=row_rank)
        selection, p_value, floor = ATTACKER_PICK, pick.get("p_value"), pick.get("floor_ssim")
    else:
        pick = min(results, key=lambda row: (_p_or_one(row), -float(row["ssim_mean"])))
        selection, p_value, floor = CORRECTED_PICK, oracle_p_value(pick, count), oracle_floor(pick, count)
    oracle = max(results, key=lambda row: float(row["ssim_mean"]))
    oracle_p = oracle_p_value(oracle, count)
    return TargetVerdict(
        pick=pick,
        selection=selection,
        candidates=count,
        p_value=_p_or_none(p_value),
        floor=floor if _finite(floor) else None,
        verdict=_verdict(_p_or_none(p_value), _level(pick)),
        oracle=oracle,
        oracle_p_value=oracle_p,
        oracle_floor=oracle_floor(oracle, count),
        oracle_verdict=_verdict(oracle_p, _level(oracle)),
    )


def _p_or_none(value: Any) -> float | None:
    return float(value) if _finite(value) else None


def _p_or_one(row: Row) -> float:
    value = row.get("p_value")
    return float(value) if _finite(value) else 1.0


def target_verdict(rows: Iterable[Row], score: str = "ssim_mean") -> str:
    """The verdict of one target from its scored results (``unknown`` where none is scored or tested)."""
    judged = judge_target(rows, score)
    return UNKNOWN if judged is None else judged.verdict


@dataclass(frozen=True)
class CellVerdict:
    """How many of a cell's targets leak, and whether that many is more than guesses reach at the level."""

    leaking: int
    targets: int
    share_low: float  # 95 % Clopper-Pearson interval on the share of leaking targets
    share_high: float
    p_value: float | None  # one-sided binomial test of `leaking` against `level`
    verdict: str
    level: float

    @property
    def powered(self) -> bool:
        """Enough targets for the test to detect a few leaking ones (``MIN_TARGETS``)."""
        return self.targets >= MIN_TARGETS

    def text(self) -> str:
        """E.g. ``leaks: 12 of 30 targets [0.23, 0.59], p 1e-06`` (``underpowered`` noted below MIN_TARGETS)."""
        if self.targets == 0:
            return UNKNOWN
        p_text = f"p {self.p_value:.2g}" if self.p_value is not None else "p —"
        power = "" if self.powered else f", underpowered (< {MIN_TARGETS} targets)"
        return (
            f"{self.verdict}: {self.leaking} of {self.targets} targets "
            f"[{self.share_low:.2f}, {self.share_high:.2f}], {p_text}{power}"
        )


def judge_cell(verdicts: Sequence[str] | Iterable[str], level: float = FLOOR_LEVEL) -> CellVerdict:
    """A cell's verdict from its targets' verdicts (``unknown`` ones are left out of the count)."""
    from scipy.stats import binomtest

    known = [verdict for verdict in verdicts if verdict in (LEAKS, AT_FLOOR)]
    leaking, targets = sum(verdict == LEAKS for verdict in known), len(known)
    if targets == 0:
        return CellVerdict(0, 0, 0.0, 1.0, None, UNKNOWN, level)
    test = binomtest(leaking, targets, level, alternative="greater")
    interval = binomtest(leaking, targets).proportion_ci(0.95, method="exact")
    verdict = LEAKS if significant(float(test.pvalue), level) else AT_FLOOR
    return CellVerdict(leaking, targets, float(interval.low), float(interval.high), float(test.pvalue), verdict, level)


def verdict_of(row: dict[str, object]) -> str:
    """A recorded attack row's verdict; ``unknown`` for rows without one (older fedsim, no public split)."""
    verdict = row.get("verdict")
    return verdict if verdict in (LEAKS, AT_FLOOR) else UNKNOWN


def oracle_p_value(row: dict[str, object], selected_over: int) -> float | None:
    """The p-value of a row picked as the best of ``selected_over`` by the ground truth: per family
    ``1 - (1 - p)^N`` from the row's single-guess p-values, the largest over families (None: an older row)."""
    singles = row.get("p_values")
    if not isinstance(singles, dict) or not singles:
        return None
    return max(float(p) if selected_over == 1 else 1.0 - (1.0 - float(p)) ** selected_over for p in singles.values())


def oracle_floor(row: dict[str, object], selected_over: int) -> float | None:
    """The SSIM critical value for a pick among ``selected_over`` by the ground truth (None: not recorded, or too
    many candidates for the draws to test)."""
    critical = row.get("floor_ssim_best_of")
    if not isinstance(critical, Sequence) or not 1 <= selected_over <= len(critical):
        return None
    value = critical[selected_over - 1]
    return None if value is None else float(value)
