"""The report's first section: per run, what leaked (the attacker's pick's verdict and the ground-truth oracle, on
a client's update and on the aggregate), the final accuracy, the privacy spent and the threat model."""

from __future__ import annotations

import pandas as pd

from fedsim.engine.leakage.no_iterations import NO_ITERATIONS
from fedsim.judge.floor import AT_FLOOR
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.reporting import tables
from fedsim.reporting.app_dp_section import app_dp_of, claimed_text
from fedsim.reporting.chance import ChanceLevel
from fedsim.reporting.render import ReportSection, Table, Text
from fedsim.reporting.runs_sections import short_name
from fedsim.rundir.layout import ATTACKS_TABLE
from fedsim.rundir.privacy import ADJACENCY, DELTA_CLIENT, DELTA_EXAMPLE, EPSILON_CLIENT, EPSILON_EXAMPLE, epsilon_text
from fedsim.rundir.reader import Run, ground_truth_selection
from fedsim.rundir.sweep_reader import Sweep


def _strongest_text(rows: pd.DataFrame) -> str:
    """A run's leakage in one line: its attacked targets counted by the attacker's pick's verdict and tested as one
    cell (``fedsim.judge.verdict``); then the strongest result against the ground truth (highest SSIM: an oracle, an
    upper bound) with its PSNR and SSIM, attack, target and round, over how many attacks it was picked."""
    rows = rows.dropna(subset=["ssim"])
    if rows.empty:
        return "not attacked"
    cell = tables.run_cell(rows)
    best = rows.loc[rows["ssim"].idxmax()]
    psnr = "exact" if best["psnr"] >= PSNR_CAP_DB else f"{best['psnr']:.1f} dB"
    compared = rows[(rows["round"] == best["round"]) & (rows["target"] == best["target"])]["attack"].nunique()
    # no attack adapted to the defense in force ran, or the portfolio did not saturate (portfolio.verdict_warning)
    bound = ", a lower bound" if "lower_bound" in rows and rows["lower_bound"].astype(bool).any() else ""
    oracle = (
        f"oracle (upper bound): {psnr}, SSIM {best['ssim']:.2f} ({best['attack']}, {best['target']}, round "
        f"{int(best['round'])}; {ground_truth_selection(compared)})"
    )
    if cell.targets == 0:
        return f"no test recorded (older fedsim); {oracle}{bound}"
    failed = "; at floor: the attacks failed, no evidence of protection" if cell.verdict == AT_FLOOR else ""
    return f"attacker's pick: {cell.text()}{failed}; {oracle}{bound}"


def _leakage_cell(scored: pd.DataFrame, unrun: pd.DataFrame, kind: str) -> str:
    """A summary cell: the strongest scored result on the targets of ``kind`` (per-client or aggregate), or, where
    every attack on them ran out of time before its first iteration, that nothing was scored."""
    text = _strongest_text(scored[scored["kind"] == kind]) if not scored.empty else "not attacked"
    if text == "not attacked" and kind in set(unrun["kind"]):
        return f"{NO_ITERATIONS}: no attack finished an iteration within its time limit, nothing to score"
    return text


def _threat_model(run: Run) -> str:
    adversary = run.config.adversary
    if not adversary.attacks:
        return "no adversary"
    knows = adversary.knows
    granted = [
        name
        for name, on in (
            ("local training", knows.local_training),
            ("sample counts", knows.num_samples),
            ("BatchNorm statistics", knows.bn_statistics),
        )
        if on
    ]
    granted.append(f"labels {knows.labels}")
    # a malicious server always holds a modification (the config fills in imprint)
    modification = adversary.modification
    server = (
        f"malicious server sending {modification.name}, "
        if adversary.server == "malicious" and modification is not None
        else "honest server, "
    )
    return f"{server}{adversary.tap} tap, targets {adversary.targets}; knows {', '.join(granted)}"


def _accuracy_text(accuracy: float, rounds: int | None, chance: ChanceLevel | None) -> str:
    """The final accuracy with its round, flagged where the model never learned (``fedsim.reporting.chance``)."""
    text = f"{accuracy:.3f}" + (f" (round {rounds})" if rounds is not None else "")
    if chance is not None and not pd.isna(accuracy) and chance.never_learned(accuracy):
        text += f"; never learned: the constant predictor reaches {chance.text()}"
    return text


def summary_section(
    sweep: Sweep,
    attacks: pd.DataFrame,
    unscored: pd.DataFrame,
    final: pd.DataFrame,
    chance: dict[str, ChanceLevel | None],
) -> ReportSection:
    rows = []
    for name, run in sweep.runs.items():
        own = attacks[attacks["run"] == name] if not attacks.empty else attacks
        unrun = unscored[(unscored["run"] == name) & (unscored["status"] == NO_ITERATIONS)]
        result = final[final["run"] == name]
        accuracy = float(result["final_accuracy"].iloc[0]) if not result.empty else float("nan")
        spent = result.iloc[0] if not result.empty else pd.Series(dtype=float)
        rounds = int(result["rounds"].iloc[0]) if not result.empty and pd.notna(result["rounds"].iloc[0]) else None
        rows.append(
            {
                "run": short_name(run),
                "strongest leakage, per client": _leakage_cell(own, unrun, "per-client"),
                "strongest leakage, aggregate": _leakage_cell(own, unrun, "aggregate"),
                "final test accuracy": _accuracy_text(accuracy, rounds, chance.get(name)),
                EPSILON_EXAMPLE: _epsilon_cell(spent, EPSILON_EXAMPLE, DELTA_EXAMPLE, run),
                EPSILON_CLIENT: _epsilon_cell(spent, EPSILON_CLIENT, DELTA_CLIENT),
                "threat model": _threat_model(run),
            }
        )
    text = Text(
        "What leaked: per run, the strongest attack result (highest SSIM over every attack, round and "
        "target) on one client's update and on the aggregate, next to what the run's model reached and the "
        f"privacy it spent: `{EPSILON_EXAMPLE}` ({ADJACENCY[EPSILON_EXAMPLE]}) and `{EPSILON_CLIENT}` "
        f"({ADJACENCY[EPSILON_CLIENT]}), each with its delta; two guarantees about different neighbours, never "
        "merged. PSNR above ~30 dB and SSIM near 1 are near-perfect copies of the training images. "
        "The attack is picked by its SSIM against the training images, which no attacker has: a ground-truth "
        f"selection, an upper bound on what one attacker would pick; each attack's own results are `{ATTACKS_TABLE}`. "
        "Every result is read against its floor, what a guess from public data alone (the public split's mean "
        "image, or random public images paired the same way) reaches on the same images: a result above it "
        "`leaks`; one at or below it is `at floor`, a failed attack, which says nothing about protection."
    )
    return ReportSection("Summary", [text, Table(pd.DataFrame(rows))])


def _epsilon_cell(spent: pd.Series, epsilon: str, delta: str, run: Run | None = None) -> str:
    """One epsilon of a run's final row with its delta, or ``no DP`` where that mechanism is not in force; for an
    audited app whose DP fedsim does not run, what the app claims itself."""
    value = spent.get(epsilon)
    if value is None or pd.isna(value):
        app_dp = app_dp_of(run.summary) if run is not None else None
        claimed = claimed_text(app_dp) if app_dp is not None else None
        return f"{claimed} (see The app's DP)" if claimed else "no DP"
    delta_value = spent.get(delta)
    return epsilon_text(float(value), None if delta_value is None or pd.isna(delta_value) else float(delta_value))
