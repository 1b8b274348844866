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

import pandas as pd

from fedsim.core.atomic import inside
from fedsim.engine.leakage.no_iterations import NO_ITERATIONS
from fedsim.judge.floor import AT_FLOOR
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.reporting import defense_curves, figures, gallery, tables
from fedsim.reporting.chance import ChanceLevel, chance_levels
from fedsim.reporting.equal_utility import BUDGETS, NONE_AT_THIS_COST, cell_text, equal_utility
from fedsim.reporting.frontier import LEAKAGE_METRICS, UTILITY_LOSS, baselines, frontier_table
from fedsim.reporting.render import Code, Gallery, Image, ReportSection, Table, Text, render_html, render_markdown
from fedsim.reporting.run_summary import write_run_summary
from fedsim.reporting.writable import ReportError, check_writable
from fedsim.rundir.layout import (
    ATTACKS_TABLE,
    CONFIG_FILE,
    DEFENSE_CURVES_FIGURE,
    DEFENSE_CURVES_TABLE,
    ENVIRONMENT_FILE,
    FRONTIER_FIGURE,
    FRONTIER_TABLE,
    LEAKAGE_ROUNDS_FIGURE,
    LEAKAGE_ROUNDS_TABLE,
    METRICS_FILE,
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
from fedsim.rundir.privacy import (
    ADJACENCY,
    DELTA_CLIENT,
    DELTA_EXAMPLE,
    EPSILON_CLIENT,
    EPSILON_EXAMPLE,
    epsilon_text,
)
from fedsim.rundir.reader import Run, Sweep, ground_truth_selection, is_run_dir, load_run, load_sweep

VERSION_KEYS = ("fedsim", "flwr", "ray", "torch", "torchvision", "numpy", "opacus")
# every file a report writes under report/, checked before the first is written
REPORT_FILES = (
    REPORT_HTML,
    REPORT_MARKDOWN,
    RUNS_TABLE,
    UTILITY_ROUNDS_TABLE,
    ATTACKS_TABLE,
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
    names = {name: _short_name(run) for name, run in sweep.runs.items()}

    rounds = tables.utility_rounds(sweep)
    attacks = tables.attack_results(sweep)
    unscored = tables.unscored_attacks(sweep)
    leakage = tables.leakage_rounds(sweep, attacks)
    final = tables.final_utility(sweep, rounds)
    configs = {name: run.config for name, run in sweep.runs.items()}
    reference = baselines(configs)
    chance = chance_levels(configs)
    frontier = frontier_table(final, attacks, reference, chance)
    runs = _runs_table(sweep, final)

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
    sections = [_summary_section(sweep, attacks, unscored, final, chance)]
    sections += _reconstructions_sections(sweep, attacks)
    sections.append(_utility_section(rounds, names, out, written_figures))
    sections.append(_leakage_section(leakage, unscored, names, out, written_figures))
    if len(sweep.runs) > 1:  # a frontier compares runs: one run has its numbers in the summary
        sections.append(_frontier_section(frontier, reference, names, out, written_figures))
        points = defense_curves.defense_points(sweep.runs, frontier, attacks)
        if defense_curves.curves(points):  # a strength sweep: some defense at two or more strengths
            sections.append(_defense_curves_section(points, out, written_figures))
    sections.append(_runs_section(sweep, runs))
    sections.append(_provenance_section(sweep))

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


def _short_name(run: Run) -> str:
    """A run in legends: its grid labels (``num_clients=8``), or its directory name outside a sweep."""
    if not run.labels:
        return run.name
    return ", ".join(f"{key.rsplit('.', 1)[-1]}={label}" for key, label in run.labels.items())


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
    server = (
        f"malicious server sending {adversary.modification.name}, "
        if adversary.server == "malicious"
        else "honest server, "
    )
    return f"{server}{adversary.tap} tap, targets {adversary.targets}; knows {', '.join(granted)}"


def _accuracy_text(accuracy: float, rounds: int | None, chance: ChanceLevel | None) -> str:
    """The final accuracy with its round, flagged where the model never learned (``fedsim.reporting.chance``)."""
    text = f"{accuracy:.3f}" + (f" (round {rounds})" if rounds is not None else "")
    if chance is not None and not pd.isna(accuracy) and chance.never_learned(accuracy):
        text += f"; never learned: the constant predictor reaches {chance.text()}"
    return text


def _summary_section(
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
                "run": _short_name(run),
                "strongest leakage, per client": _leakage_cell(own, unrun, "per-client"),
                "strongest leakage, aggregate": _leakage_cell(own, unrun, "aggregate"),
                "final test accuracy": _accuracy_text(accuracy, rounds, chance.get(name)),
                EPSILON_EXAMPLE: _epsilon_cell(spent, EPSILON_EXAMPLE, DELTA_EXAMPLE),
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


def _epsilon_cell(spent: pd.Series, epsilon: str, delta: str) -> str:
    """One epsilon of a run's final row with its delta, or ``no DP`` where that mechanism is not in force."""
    value = spent.get(epsilon)
    if value is None or pd.isna(value):
        return "no DP"
    delta_value = spent.get(delta)
    return epsilon_text(float(value), None if delta_value is None or pd.isna(delta_value) else float(delta_value))


def _runs_table(sweep: Sweep, final: pd.DataFrame) -> pd.DataFrame:
    rows = [
        {"run": name, **run.labels, "defenses": tables.defense_text(run.config), "status": sweep.status.get(name, "")}
        for name, run in sweep.runs.items()
    ]
    return pd.DataFrame(rows).merge(final, on="run", how="left")


def _runs_section(sweep: Sweep, runs: pd.DataFrame) -> ReportSection:
    missing = [name for name, status in sweep.status.items() if name not in sweep.runs]
    blocks: list = [
        Text(
            f"{len(sweep.runs)} run(s) under `{sweep.path}`"
            + (f"; grid over {', '.join(f'`{key}`' for key in sweep.grid)}" if sweep.grid else "")
            + (f"; not started yet: {', '.join(missing)}" if missing else "")
            + "."
        )
    ]
    blocks.append(Table(runs, RUNS_TABLE))
    return ReportSection("Runs", blocks)


def _utility_section(rounds, names, out: Path, written: list[Path]) -> ReportSection:
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


def _leakage_section(leakage, unscored: pd.DataFrame, names, out: Path, written: list[Path]) -> ReportSection:
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
            "would report (the lowest gradient match; p-value at most the level against guesses made without the "
            "update), and how many stay at floor; `no_floor`: targets scored by an older fedsim, without a test. "
            "`leaking_low`-`leaking_high`: a 95 % interval on the share leaking; `verdict` and `cell_p_value`: "
            "whether that many leaking targets is more than guesses reach at the level (binomial test). Every "
            f"attack result, per target, with its floor, p-value and verdict: `{ATTACKS_TABLE}`."
        )
    )
    blocks += _unscored_blocks(unscored)
    return ReportSection("Leakage over rounds", blocks)


def _frontier_section(frontier, reference, names, out: Path, written: list[Path]) -> ReportSection:
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


def _defense_curves_section(points: list[defense_curves.DefensePoint], out: Path, written: list[Path]) -> ReportSection:
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


RECONSTRUCTIONS_TITLE = "Reconstructions: every attacked client and the aggregate, per attacked round"


def _reconstructions_sections(sweep: Sweep, attacks: pd.DataFrame) -> list[ReportSection]:
    """The gallery: per run, its strongest result on a client's update and on the aggregate first, then every
    attacked round with a card per attacked target (fedsim.reporting.gallery)."""
    intro = Text(
        "Originals (top row of each image) over their reconstructions (the row below), paired image by image. "
        "Per target, the attack with the best SSIM against the training images (a ground-truth selection, which "
        "no attacker can make; any other attack's SSIM is listed under it): its median PSNR and mean SSIM over "
        "the images, LPIPS where it was measured, the SSIM floor (what a guess from public data alone reaches on "
        "the same images) and the target's verdict, `leaks` (red edge) when some attack on it scored above its "
        "floor, `at floor` when none did (a failed attack, no evidence of protection)."
    )
    head = ReportSection(RECONSTRUCTIONS_TITLE, [intro])
    sections = [head]
    several = len(sweep.runs) > 1
    for name, run in sweep.runs.items():
        strongest = gallery.strongest_cards(run, attacks)
        rounds = gallery.round_galleries(run, attacks)
        if not rounds:
            continue
        label = f"`{name}`, defenses: {tables.defense_text(run.config)}"
        level = 3
        if several:
            sections.append(ReportSection(f"{name} ({tables.defense_text(run.config)})", [], level=3))
            level = 4
        else:
            head.blocks.append(Text(label + "."))
        if strongest:
            sections.append(
                ReportSection(
                    "Strongest results: on one client's update and on the aggregate",
                    [Gallery(tuple(strongest), {"run": name, "strongest": "true"})],
                    level=level,
                )
            )
        for one_round in rounds:
            blocks: list = [Text(one_round.text())] + ([one_round.block()] if one_round.cards else [])
            sections.append(ReportSection(f"Round {one_round.round}", blocks, level=level))
    if len(sections) == 1:
        head.blocks.append(Text("No reconstruction grid (no attack result, or `adversary.save_images: false`)."))
    return sections


def _provenance_section(sweep: Sweep) -> ReportSection:
    versions = []
    for name, run in sweep.runs.items():
        env = run.environment or {}
        packages = env.get("versions") or {}
        versions.append(
            {
                "run": name,
                "python": env.get("python"),
                **{k: packages.get(k) for k in VERSION_KEYS},
                "device": env.get("device"),
                "cuda": env.get("cuda"),
                "platform": env.get("platform"),
            }
        )
    blocks: list = [
        Text(
            "Every figure and table above is computed from these runs; their resolved configs "
            f"(`{CONFIG_FILE}`) and environments (`{ENVIRONMENT_FILE}`) follow."
        ),
        Table(pd.DataFrame(versions)),
    ]
    for name, run in sweep.runs.items():
        command = " ".join((run.environment or {}).get("command") or [])
        if command:
            blocks.append(Text(f"`{name}` was started by `{command}`."))
        blocks.append(Code((run.path / CONFIG_FILE).read_text(), f"{name}/{CONFIG_FILE}", "yaml"))
    return ReportSection("Configs and versions", blocks)
