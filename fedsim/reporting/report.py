"""`fedsim report RUN_DIR|SWEEP_DIR`: what leaked, a gallery of every attacked client and the aggregate per
attacked round (fedsim.reporting.gallery), utility and leakage over rounds, the privacy-utility frontier (for
several runs), and the configs and versions behind them, as self-contained HTML plus the same content as Markdown
and CSV tables, under ``<dir>/report/``.

A run directory is reported as a sweep of one run, plus its own ``utility.png``, ``summary.md`` and
``rounds.csv`` (fedsim.reporting.run_summary, from the same tables and figure); a folder that holds run
directories but no ``sweep.json`` (e.g. ``bench/defenses.py --out``) is reported as a sweep of all of them.
"""

from __future__ import annotations

from pathlib import Path

from fedsim.core.atomic import inside
from fedsim.reporting import defense_curves, tables
from fedsim.reporting.app_dp_section import app_dp_section
from fedsim.reporting.chance import chance_levels
from fedsim.reporting.comparison_sections import defense_curves_section, frontier_section
from fedsim.reporting.frontier import baselines, frontier_table
from fedsim.reporting.reconstructions_section import reconstructions_sections
from fedsim.reporting.render import render_html, render_markdown
from fedsim.reporting.rounds_sections import leakage_section, utility_section
from fedsim.reporting.run_summary import write_run_summary
from fedsim.reporting.runs_sections import provenance_section, runs_section, runs_table, short_name
from fedsim.reporting.summary_section import summary_section
from fedsim.reporting.text_section import text_section
from fedsim.reporting.writable import ReportError, check_writable
from fedsim.rundir.layout import (
    ATTACKS_TABLE,
    DEFENSE_CURVES_FIGURE,
    DEFENSE_CURVES_TABLE,
    FRONTIER_FIGURE,
    FRONTIER_TABLE,
    LEAKAGE_ROUNDS_FIGURE,
    LEAKAGE_ROUNDS_TABLE,
    METRICS_FILE,
    RECOVERED_TEXT_TABLE,
    REPORT_DIR,
    REPORT_HTML,
    REPORT_MARKDOWN,
    RUN_ROUNDS_TABLE,
    RUN_SUMMARY,
    RUN_UTILITY_FIGURE,
    RUNS_TABLE,
    UTILITY_ROUNDS_FIGURE,
    UTILITY_ROUNDS_TABLE,
)
from fedsim.rundir.reader import is_run_dir, load_run
from fedsim.rundir.sweep_reader import Sweep, load_sweep

# every file a report writes under report/, checked before the first is written
REPORT_FILES = (
    REPORT_HTML,
    REPORT_MARKDOWN,
    RUNS_TABLE,
    UTILITY_ROUNDS_TABLE,
    ATTACKS_TABLE,
    RECOVERED_TEXT_TABLE,
    LEAKAGE_ROUNDS_TABLE,
    FRONTIER_TABLE,
    DEFENSE_CURVES_TABLE,
    UTILITY_ROUNDS_FIGURE,
    LEAKAGE_ROUNDS_FIGURE,
    FRONTIER_FIGURE,
    DEFENSE_CURVES_FIGURE,
    RUN_UTILITY_FIGURE,
    RUN_SUMMARY,
    RUN_ROUNDS_TABLE,
)


def load_for_report(path: Path) -> Sweep:
    path = Path(path)
    if is_run_dir(path):
        run = load_run(path)
        return Sweep(path, {run.name: run}, {}, {run.name: "complete" if run.summary else "incomplete"})
    try:
        return load_sweep(path)
    except FileNotFoundError:
        raise ReportError(
            f"report: '{path}' is not a fedsim run directory (no {METRICS_FILE}), a sweep or a folder of runs"
        ) from None


def write_report(path: Path) -> list[Path]:
    """`fedsim report PATH`: the full report, and for a run directory also its own summary files; returns them."""
    path = Path(path)
    sweep = load_for_report(path)
    if not is_run_dir(path):
        return write_full_report(path, sweep)
    (run,) = sweep.runs.values()
    if run.events("eval").empty:
        raise ReportError(f"report: '{path}' has no evaluated round yet")
    written = write_full_report(path, sweep)
    return write_run_summary(run, path / REPORT_DIR, path / REPORT_DIR / UTILITY_ROUNDS_FIGURE) + written


def write_full_report(path: Path, sweep: Sweep | None = None) -> list[Path]:
    """Write report.html, report.md, the CSV tables and the PNG figures under ``path/report``; returns them.

    ``sweep``: the runs under ``path`` when already loaded.
    """
    sweep = sweep if sweep is not None else load_for_report(Path(path))
    out = report_dir(Path(path))
    names = {name: short_name(run) for name, run in sweep.runs.items()}

    rounds = tables.utility_rounds(sweep)
    attacks = tables.attack_results(sweep)
    unscored = tables.unscored_attacks(sweep)
    leakage = tables.leakage_rounds(sweep, attacks)
    final = tables.final_utility(sweep, rounds)
    configs = {name: run.config for name, run in sweep.runs.items()}
    reference = baselines(configs)
    chance = chance_levels(configs)
    frontier = frontier_table(final, attacks, reference, chance)
    runs = runs_table(sweep, final)

    csvs = {
        RUNS_TABLE: runs,
        UTILITY_ROUNDS_TABLE: rounds,
        ATTACKS_TABLE: attacks,
        LEAKAGE_ROUNDS_TABLE: leakage,
        FRONTIER_TABLE: frontier,
    }
    for name, frame in csvs.items():
        frame.to_csv(out / name, index=False)

    written_figures: list[Path] = []
    # what leaked and what it cost first; how each number was produced after
    sections = [summary_section(sweep, attacks, unscored, final, chance)]
    app_dp = app_dp_section(sweep)  # an audited app's own DP, its claims and the bounds beside them
    sections += [app_dp] if app_dp is not None else []
    sections += reconstructions_sections(sweep, attacks)
    recovered = text_section(sweep)  # a text attack's originals beside what it recovered
    if recovered is not None:
        section, texts = recovered
        sections.append(section)
        texts.to_csv(out / RECOVERED_TEXT_TABLE, index=False)
    sections.append(utility_section(rounds, names, out, written_figures))
    sections.append(leakage_section(leakage, unscored, names, out, written_figures))
    if len(sweep.runs) > 1:  # a frontier compares runs: one run has its numbers in the summary
        sections.append(frontier_section(frontier, reference, names, out, written_figures))
        points = defense_curves.defense_points(sweep.runs, frontier, attacks)
        if defense_curves.curves(points):  # a strength sweep: some defense at two or more strengths
            sections.append(defense_curves_section(points, out, written_figures))
    sections.append(runs_section(sweep, runs))
    sections.append(provenance_section(sweep))

    title = f"fedsim report: {Path(path).resolve().name}"
    markdown, page = out / REPORT_MARKDOWN, out / REPORT_HTML
    markdown.write_text(render_markdown(title, sections, out))
    page.write_text(render_html(title, sections))
    return [page, markdown, *(out / name for name in csvs), *written_figures]


def report_dir(root: Path) -> Path:
    """``root/report``, made; refused in one line (OutsideDirectory) before anything is written when it, or a
    file the report writes in it, is a symlink leading outside ``root``."""
    out = inside(root, root / REPORT_DIR)
    for name in REPORT_FILES:
        inside(root, out / name)
    check_writable(root, out)  # a read-only run directory: one line, before anything is computed
    return out
