"""The report's sections over rounds: utility (accuracy, loss, privacy spent) and leakage (the strongest attack per
attacked round and target kind, with its verdict counts), and the attack results left without a score."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedsim.reporting import figures, tables
from fedsim.reporting.frontier import LEAKAGE_METRICS
from fedsim.reporting.render import Image, ReportSection, Table, Text
from fedsim.rundir.layout import (
    ATTACKS_TABLE,
    LEAKAGE_ROUNDS_FIGURE,
    LEAKAGE_ROUNDS_TABLE,
    UTILITY_ROUNDS_FIGURE,
    UTILITY_ROUNDS_TABLE,
)
from fedsim.rundir.privacy import ADJACENCY, EPSILON_CLIENT, EPSILON_EXAMPLE


def utility_section(rounds, names, out: Path, written: list[Path]) -> ReportSection:
    if rounds.empty:
        return ReportSection("Utility over rounds", [Text("No evaluated round yet.")])
    png = out / UTILITY_ROUNDS_FIGURE
    figures.utility_figure(rounds, names, png)  # always written: the run's own summary.md shows it
    written.append(png)
    dp = (
        f" The privacy spent where a DP mechanism is on, in its own panel: `{EPSILON_EXAMPLE}` "
        f"({figures.EPSILON_LINE_NAMES[EPSILON_EXAMPLE]}, {ADJACENCY[EPSILON_EXAMPLE]}) and `{EPSILON_CLIENT}` "
        f"({figures.EPSILON_LINE_NAMES[EPSILON_CLIENT]}, {ADJACENCY[EPSILON_CLIENT]}), two guarantees never merged."
        if rounds[[EPSILON_EXAMPLE, EPSILON_CLIENT]].notna().any().any()
        else ""
    )
    pivot, step = tables.accuracy_by_round(rounds, names)
    every = "every round" if step == 1 else f"every {step} rounds and the last"
    blocks: list = []
    if rounds["round"].nunique() > 2:  # a curve needs rounds to compare; one trained round is a table
        blocks.append(
            Image(png, "Test accuracy and loss of the global model after every round, one colour per run." + dp)
        )
    blocks += [
        Text(
            f"Test accuracy per run, {every} (all rounds, with test loss, the clients' mean training loss, "
            f"`{EPSILON_EXAMPLE}` and `{EPSILON_CLIENT}` with their deltas: `{UTILITY_ROUNDS_TABLE}`)."
        ),
        Table(pivot, UTILITY_ROUNDS_TABLE),  # its first column, the round, stays in view
    ]
    return ReportSection("Utility over rounds", blocks)


UNSCORED_TEXT = (
    "Attack results without a score, hence without a floor or verdict: `no-iterations`, the attack's time limit ran "
    "out before its first iteration finished (what it holds is its starting guess, not a reconstruction); "
    "`failed`, the attack raised an error; `no-data`, the target trained on no sample that round."
)


def _unscored_blocks(unscored: pd.DataFrame) -> list:
    return [Text(UNSCORED_TEXT), Table(unscored, pinned=3)] if not unscored.empty else []  # run, round, attack


def leakage_section(leakage, unscored: pd.DataFrame, names, out: Path, written: list[Path]) -> ReportSection:
    if leakage.empty:
        if not unscored.empty:
            return ReportSection(
                "Leakage over rounds", [Text("No attack result was scored."), *_unscored_blocks(unscored)]
            )
        return ReportSection("Leakage over rounds", [Text("No attack result: no run has an `adversary` with attacks.")])
    blocks: list = []
    drawn: list[str] = [metric for metric in LEAKAGE_METRICS if leakage.filter(like=metric).notna().any().any()]
    if leakage.groupby("run")["round"].nunique().max() > 1:  # one attacked round is a table, not a curve
        png = out / LEAKAGE_ROUNDS_FIGURE
        drawn = figures.leakage_figure(leakage, names, png)
        written.append(png)
        blocks.append(
            Image(
                png,
                "The strongest attack on each target per attacked round (ground-truth selection by SSIM over "
                "the attacks that ran on it): median PSNR and mean SSIM over the attacked clients' images "
                "(solid) versus the aggregate's (dashed), one colour per run.",
            )
        )
    absent = [metric.upper() for metric in LEAKAGE_METRICS if metric not in drawn]
    if absent:
        blocks.append(
            Text(f"Not recorded: {', '.join(absent)} (LPIPS needs torchvision's ImageNet AlexNet in the torch cache).")
        )
    blocks.append(
        Text(
            "Per run, round and target kind: on each target the attack with the best SSIM against the ground "
            "truth (ground-truth selection over `attacks` attacks, an oracle); over those targets' images, `psnr` "
            "is the median PSNR (dB; exact at 100), `psnr_at_30db` and `psnr_at_40db` the fractions of images at "
            "or above 30 and 40 dB, `ssim` the mean SSIM and [`ssim_low`, `ssim_high`] its 95 % bootstrap "
            "interval over the images."
        )
    )
    blocks.append(Table(leakage, LEAKAGE_ROUNDS_TABLE, pinned=3))  # run, round, kind
    blocks.append(
        Text(
            "`leaking`, `at_floor`: how many of those targets leak by the test of the result the attacker itself "
            "would report (`adversary.ranking`: attacks built for a defense in force first, then the lowest gradient "
            "match; p-value at most the level against guesses made without the "
            "update), and how many stay at floor; `no_floor`: targets scored by an older fedsim, without a test. "
            "`leaking_low`-`leaking_high`: a 95 % interval on the share leaking; `verdict` and `cell_p_value`: "
            "whether that many leaking targets is more than guesses reach at the level (binomial test). Every "
            f"attack result, per target, with its floor, p-value and verdict: `{ATTACKS_TABLE}`."
        )
    )
    blocks += _unscored_blocks(unscored)
    return ReportSection("Leakage over rounds", blocks)
