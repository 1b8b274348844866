"""The report's comparisons of runs: the privacy-utility frontier, and each defense over its strengths at equal
utility (a strength sweep)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedsim.reporting import defense_curves, figures
from fedsim.reporting.equal_utility import BUDGETS, NONE_AT_THIS_COST, cell_text, equal_utility
from fedsim.reporting.frontier import UTILITY_LOSS
from fedsim.reporting.render import Image, ReportSection, Table, Text
from fedsim.rundir.layout import DEFENSE_CURVES_FIGURE, DEFENSE_CURVES_TABLE, FRONTIER_FIGURE, FRONTIER_TABLE


def frontier_section(frontier, reference, names, out: Path, written: list[Path]) -> ReportSection:
    title = "Privacy-utility frontier"
    blocks: list = [
        Text(
            "Per run, the strongest attack over every attack, round and target (best PSNR and SSIM, lowest LPIPS; "
            "a ground-truth selection over the attacks, an oracle; a result's PSNR is the median over its images) "
            "against its utility loss relative to the undefended run with otherwise the same config (no "
            "`client.defenses`, no `strategy.dp`): the drop in final test accuracy and the change in final training "
            "loss. A run is on the Pareto front (`pareto_<metric>`) when no other run leaks less at no more "
            "accuracy drop. `verdict`: `leaks` when more of the run's attacked targets leak (by the attacker's "
            "pick's test) than guesses without the update would at the level (binomial test), else `at floor`; "
            "a run at floor is on "
            "the front by numbers that mean nothing: its attacks failed, which is no evidence that it protects. "
            "`never_learned`: the run's final accuracy is within the 95 % Wilson interval of the constant "
            "predictor's (the test set's majority-class rate, `chance_accuracy`): its model learned nothing, so "
            "it is kept off every front, whatever its leakage."
        )
    ]
    if all(ref is None for ref in reference.values()):
        blocks.append(
            Text(
                "No undefended run (no `client.defenses` and no `strategy.dp`) with otherwise equal "
                "settings: utility loss and the front cannot be computed."
            )
        )
    else:
        unmatched = [name for name, ref in reference.items() if ref is None]
        if unmatched:
            blocks.append(Text(f"No undefended counterpart for: {', '.join(unmatched)}."))
    # a frontier needs runs to compare: one run is its table row
    if frontier["attack_results"].sum() > 0 and frontier[UTILITY_LOSS].notna().sum() > 1:
        png = out / FRONTIER_FIGURE
        figures.frontier_figure(frontier, names, png)
        written.append(png)
        caption = (
            "Strongest attack's leakage against accuracy drop; the Pareto front in red, runs that never learned "
            f"as grey crosses. Points: {figures.frontier_key(frontier, names)}."
        )
        blocks.append(Image(png, caption))
    blocks.append(Table(frontier, FRONTIER_TABLE))
    return ReportSection(title, blocks)


def defense_curves_section(points: list[defense_curves.DefensePoint], out: Path, written: list[Path]) -> ReportSection:
    """Each defense over its strengths (``fedsim.reporting.defense_curves``) and the equal-utility table."""
    frame = defense_curves.points_frame(points)
    frame.to_csv(out / DEFENSE_CURVES_TABLE, index=False)
    png = out / DEFENSE_CURVES_FIGURE
    figures.defense_curves_figure(defense_curves.curves(points), [point for point in points if point.undefended], png)
    written += [out / DEFENSE_CURVES_TABLE, png]
    budgets = equal_utility(point.strength_point() for point in points if not point.undefended)
    budget_frame = pd.DataFrame(
        [
            {"defense": defense, **{f"drop <= {budget:g} points": cell_text(cells[budget]) for budget in BUDGETS}}
            for defense, cells in budgets.items()
        ]
    )
    return ReportSection(
        "Each defense over its strengths, at equal utility",
        [
            Text(
                "Runs that differ only in their seed are one point; a defense's points (the same defense, every "
                "other setting equal) one line, cheapest first. Per point, means over its seeds with 95 % "
                "bootstrap intervals (the seeds resampled): the accuracy drop in points against the undefended run "
                "of the same seed, at each run's last round (its plateau where `federation.plateau` stopped it), and "
                "the SSIM of each run's strongest attack (a ground-truth selection over the attacks, an oracle). "
                "Hollow markers: every attack stayed at its floor (what a guess from public data reaches), a failed "
                "attack, no evidence that the defense protects. Runs whose model never learned are left out."
            ),
            Image(png, "The strongest attack's SSIM against the accuracy drop, one line per defense."),
            Table(frame, DEFENSE_CURVES_TABLE, pinned=2),
            Text(
                "Paper 001's comparison at equal utility: per defense and accuracy-drop budget, its strength of "
                "lowest leakage among those whose mean drop stays within the budget (leakage [interval], floor, "
                "verdict; strength, drop), or "
                f'"{NONE_AT_THIS_COST}" when every strength it was tried at costs more.'
            ),
            Table(budget_frame),
        ],
    )
