"""The report's figures (matplotlib, headless): utility over rounds, leakage over rounds, the frontier, and each
defense over its strengths.

Each function draws one PNG from one table of fedsim.reporting.tables / .frontier and returns nothing
else; which runs a figure shows is the table's ``run`` column, so the report can list their configs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")  # reports are written headless, from the CLI or CI
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from fedsim.reporting.defense_curves import DefensePoint
from fedsim.reporting.frontier import LEAKAGE_METRICS, UTILITY_LOSS
from fedsim.reporting.summaries import Estimate
from fedsim.rundir.privacy import EPSILON_CLIENT, EPSILON_EXAMPLE

METRIC_TITLES = {
    "psnr": "PSNR (dB, higher = more leakage)",
    "ssim": "SSIM (higher = more leakage)",
    "lpips": "LPIPS (lower = more leakage)",
}
#: how tables.leakage_rounds summarises a metric over the images, said in the leakage figure's titles
LEAKAGE_SUMMARIES = {"psnr": "median ", "ssim": "mean "}
DPI = 110
#: the utility figure's epsilon lines: example-level and client-level apart
EPSILON_STYLES: dict[str, Literal["--", ":"]] = {EPSILON_EXAMPLE: "--", EPSILON_CLIENT: ":"}
EPSILON_LINE_NAMES = {EPSILON_EXAMPLE: "dashed", EPSILON_CLIENT: "dotted"}
#: the epsilon panel's legend: which neighbour each guarantee is about
EPSILON_LEVELS = {EPSILON_EXAMPLE: "example-level", EPSILON_CLIENT: "client-level"}
#: the frontier figure's x ticks: few enough that their labels never run into each other
FRONTIER_TICKS = 5


def _colors(runs: list[str]) -> dict[str, tuple[float, ...]]:
    cmap = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")
    return {run: cmap(i % cmap.N) for i, run in enumerate(runs)}


def _legend_columns(labels: list[str]) -> int:
    """As many legend columns as fit the figure's width for labels this long (1 to 3)."""
    longest = max((len(label) for label in labels), default=1)
    return max(1, min(3, len(labels), 110 // max(longest, 1)))


def _legend_below(fig: plt.Figure, handles: list, labels: list[str]) -> None:
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=_legend_columns(labels), fontsize=7, frameon=False)


def _legend_rows(labels: list[str]) -> int:
    return math.ceil(len(labels) / _legend_columns(labels)) if labels else 0


def utility_figure(rounds: pd.DataFrame, names: Mapping[str, str], path: Path) -> None:
    """Test accuracy and test loss per round, one line per run; where DP is on, a third panel of the epsilon
    spent, ``epsilon_example`` dashed and ``epsilon_client`` dotted (two guarantees, two lines, never merged, and
    never on the accuracy panel, where a line of epsilon would read as one more accuracy curve)."""
    runs = list(dict.fromkeys(rounds["run"]))
    colors = _colors(runs)
    spent_columns = [c for c in (EPSILON_EXAMPLE, EPSILON_CLIENT) if c in rounds and rounds[c].notna().any()]
    rows = max(_legend_rows([names[run] for run in runs]), 1)
    panels = 3 if spent_columns else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 4 + 0.25 * rows), dpi=DPI)
    acc_axis, loss_axis = axes[0], axes[1]
    for run in runs:
        own = rounds[rounds["run"] == run]
        acc_axis.plot(own["round"], own["accuracy"], marker="o", markersize=3, color=colors[run], label=names[run])
        loss_axis.plot(own["round"], own["loss"], marker="o", markersize=3, color=colors[run])
        for column in spent_columns:
            spent = own.dropna(subset=[column])
            if not spent.empty:
                axes[2].plot(spent["round"], spent[column], linestyle=EPSILON_STYLES[column], color=colors[run])
    acc_axis.set(xlabel="round", ylabel="test accuracy", ylim=(0, 1), title="test accuracy")
    loss_axis.set(xlabel="round", ylabel="test loss", title="test loss")
    if spent_columns:
        axes[2].set(xlabel="round", ylabel="epsilon spent", title="privacy spent (epsilon)")
        axes[2].set_ylim(bottom=0)
        # the line styles name the guarantees; the colours name the runs, as in the other panels
        styles = [
            plt.Line2D(
                [], [], color="black", linestyle=EPSILON_STYLES[column], label=f"{column} ({EPSILON_LEVELS[column]})"
            )
            for column in spent_columns
        ]
        axes[2].legend(handles=styles, fontsize=7, loc="upper left")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    handles, labels = acc_axis.get_legend_handles_labels()
    fig.tight_layout(rect=(0, min(0.05 * rows + 0.02, 0.5), 1, 1))
    _legend_below(fig, handles, labels)
    fig.savefig(path)
    plt.close(fig)


def _round_ticks(axis: plt.Axes, rounds: pd.Series) -> None:
    """Ticks at the attacked rounds when there are few of them (one round would get fractional ticks)."""
    attacked = sorted({int(r) for r in rounds})
    if len(attacked) <= 12:
        axis.set_xticks(attacked)
    else:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def _finite_cap(values: pd.Series) -> tuple[pd.Series, bool]:
    """+inf (exact reconstructions) drawn just above the largest finite value, so it stays on the plot."""
    infinite = values == math.inf
    if not infinite.any():
        return values, False
    finite = values[~infinite & values.notna()]
    top = (finite.max() if len(finite) else 0.0) + 10.0
    return values.where(~infinite, top), True


def leakage_figure(leakage: pd.DataFrame, names: Mapping[str, str], path: Path) -> list[str]:
    """PSNR, SSIM and LPIPS per attacked round, as ``tables.leakage_rounds`` summarises them (median PSNR, mean
    SSIM over the images): per client (solid) versus the aggregate (dashed), one colour per run. Returns the
    metrics drawn (those with any value)."""
    metrics = [m for m in LEAKAGE_METRICS if leakage[m].notna().any()]
    runs = list(dict.fromkeys(leakage["run"]))
    colors = _colors(runs)
    fig, axes = plt.subplots(1, max(len(metrics), 1), figsize=(4.2 * max(len(metrics), 1), 4.2), dpi=DPI, squeeze=False)
    handles: dict[str, object] = {}
    for axis, metric in zip(axes[0], metrics):
        capped_any = False
        for run in runs:
            for kind, style, marker in (("per-client", "-", "o"), ("aggregate", "--", "s")):
                own = leakage[(leakage["run"] == run) & (leakage["kind"] == kind)].dropna(subset=[metric])
                if own.empty:
                    continue
                values, capped = _finite_cap(own[metric])
                capped_any |= capped
                (line,) = axis.plot(
                    own["round"], values, linestyle=style, marker=marker, markersize=4, color=colors[run]
                )
                handles.setdefault(f"{names[run]} ({kind})", line)
        title = LEAKAGE_SUMMARIES.get(metric, "") + METRIC_TITLES[metric]
        axis.set(xlabel="round", title=title + (" (top: exact)" if capped_any else ""))
        _round_ticks(axis, leakage["round"])
        axis.grid(alpha=0.3)
    if not metrics:
        axes[0][0].text(0.5, 0.5, "no attack results", ha="center", va="center")
        axes[0][0].set_axis_off()
    rows = _legend_rows(list(handles))
    fig.set_figheight(4.2 + 0.22 * rows)
    fig.tight_layout(rect=(0, min(0.05 * rows + 0.02, 0.5), 1, 1))
    _legend_below(fig, list(handles.values()), list(handles))
    fig.savefig(path)
    plt.close(fig)
    return metrics


def frontier_figure(frontier: pd.DataFrame, names: Mapping[str, str], path: Path) -> list[str]:
    """Strongest attack's leakage against accuracy drop, one point per run, the Pareto front in red; runs whose
    model never learned (``never_learned``) as grey crosses, off the front. Each point is labelled by its run's
    position in ``frontier`` (1, 2, ...), short labels that do not run into each other or into the ticks; the
    caption maps them to runs (``frontier_key``). Returns the metrics drawn (those with a value and a baseline)."""
    usable = frontier.dropna(subset=[UTILITY_LOSS])
    metrics = [m for m in LEAKAGE_METRICS if usable[f"best_{m}"].notna().any()]
    never = usable["never_learned"].astype(bool) if "never_learned" in usable else pd.Series(False, usable.index)
    numbers = {index: position + 1 for position, index in enumerate(frontier.index)}
    fig, axes = plt.subplots(1, max(len(metrics), 1), figsize=(4.6 * max(len(metrics), 1), 4.4), dpi=DPI, squeeze=False)
    for axis, metric in zip(axes[0], metrics):
        column, flag = f"best_{metric}", f"pareto_{metric}"
        points = usable.dropna(subset=[column])
        values, capped = _finite_cap(points[column])
        front = points[flag].astype(bool)
        lost = never.reindex(points.index, fill_value=False)
        dominated = ~front & ~lost
        axis.scatter(
            points[UTILITY_LOSS][dominated],
            values[dominated],
            facecolors="none",
            edgecolors="tab:gray",
            s=40,
            label="dominated",
        )
        axis.scatter(points[UTILITY_LOSS][front], values[front], color="tab:red", s=50, zorder=3, label="Pareto front")
        if lost.any():
            axis.scatter(
                points[UTILITY_LOSS][lost], values[lost], marker="x", color="tab:gray", s=40, label="never learned"
            )
        order = points[UTILITY_LOSS][front].sort_values().index
        axis.plot(points[UTILITY_LOSS][order], values[order], color="tab:red", linewidth=1, drawstyle="steps-post")
        axis.margins(x=0.12, y=0.1)  # room for the labels of the outermost points
        for (x, y), labels in _label_groups(axis, points[UTILITY_LOSS], values, numbers).items():
            axis.annotate(", ".join(labels), (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
        axis.set(
            xlabel="accuracy drop vs undefended (final round)",
            ylabel=f"strongest attack's {metric.upper()}",
            title=METRIC_TITLES[metric] + (" (top: exact)" if capped else ""),
        )
        axis.xaxis.set_major_locator(MaxNLocator(nbins=FRONTIER_TICKS))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    if not metrics:
        axes[0][0].text(
            0.5,
            0.5,
            "no run with both an attack result and an undefended baseline",
            ha="center",
            va="center",
            fontsize=8,
        )
        axes[0][0].set_axis_off()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return metrics


#: points closer than this on the figure (px) share one label, "2, 3", rather than print over each other
LABEL_RADIUS_PX = 12


def _label_groups(
    axis: plt.Axes, xs: pd.Series, ys: pd.Series, numbers: Mapping[object, int]
) -> dict[tuple[float, float], list[str]]:
    """The points' numbers grouped by where they are drawn: each group at its first point, the numbers of every
    point within ``LABEL_RADIUS_PX`` of it joined."""
    axis.autoscale_view()
    groups: dict[tuple[float, float], list[str]] = {}
    anchors: list[tuple[tuple[float, float], tuple[float, float]]] = []  # (data point, its position in px)
    for index in sorted(xs.index, key=lambda i: numbers[i]):
        point = (float(xs[index]), float(ys[index]))
        px, py = axis.transData.transform(point)
        near = next((data for data, (ax_, ay) in anchors if math.hypot(px - ax_, py - ay) < LABEL_RADIUS_PX), None)
        if near is None:
            anchors.append((point, (px, py)))
            groups[point] = []
        groups[near or point].append(str(numbers[index]))
    return groups


def frontier_key(frontier: pd.DataFrame, names: Mapping[str, str]) -> str:
    """The frontier figure's point labels in words: ``1 = <run>, 2 = <run>, ...`` in the table's order."""
    return ", ".join(f"{position + 1} = {names[run]}" for position, run in enumerate(frontier["run"]))


def defense_curves_figure(
    curves: Mapping[str, list[DefensePoint]],
    undefended: list[DefensePoint],
    path: Path,
    drop_label: str = "accuracy drop vs undefended (points, last round)",
) -> None:
    """One line per defense through its strengths (``fedsim.reporting.defense_curves``): the strongest attack's
    SSIM against the accuracy drop, each point with its 95 % intervals on both axes; a filled marker where the
    attacks leaked (above the floor), a hollow one where they stayed at the floor or no floor was recorded. The
    undefended runs are a black star at no drop, the mean floor a grey dashed line."""
    fig, axis = plt.subplots(figsize=(6.4, 4.6), dpi=DPI)
    colors = _colors(list(curves))
    for curve, points in curves.items():
        xs = [p.drop.value for p in points]
        ys = [p.leakage.value for p in points]
        axis.plot(xs, ys, color=colors[curve], linewidth=1.2, label=curve)
        for point in points:
            axis.errorbar(
                point.drop.value,
                point.leakage.value,
                xerr=[[_below(point.drop)], [_above(point.drop)]],
                yerr=[[_below(point.leakage)], [_above(point.leakage)]],
                fmt="o",
                markersize=5,
                color=colors[curve],
                markerfacecolor=colors[curve] if point.verdict == "leaks" else "white",
                elinewidth=0.8,
                capsize=2,
            )
    for point in undefended:
        axis.errorbar(
            0.0,
            point.leakage.value,
            yerr=[[_below(point.leakage)], [_above(point.leakage)]],
            fmt="*",
            markersize=10,
            color="black",
            label="undefended",
        )
    floors = [p.floor for points in curves.values() for p in points if not math.isnan(p.floor)]
    if floors:
        axis.axhline(sum(floors) / len(floors), color="tab:gray", linestyle="--", linewidth=1, label="floor (mean)")
    # linear within a point of no drop, logarithmic beyond: one costly strength must not squeeze the rest
    axis.set_xscale("symlog", linthresh=1.0)
    axis.set(
        xlabel=drop_label + ", symlog",
        ylabel="strongest attack's SSIM",
        title="Each defense over its strengths (filled: leaks; hollow: at floor or no floor)",
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _below(estimate: Estimate) -> float:
    return 0.0 if math.isnan(estimate.low) else max(estimate.value - estimate.low, 0.0)


def _above(estimate: Estimate) -> float:
    return 0.0 if math.isnan(estimate.high) else max(estimate.high - estimate.value, 0.0)
