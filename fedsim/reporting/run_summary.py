"""A single run's own files beside its full report: ``utility.png`` (the full report's utility figure),
``rounds.csv`` (every evaluated round with the privacy spent by then: ``epsilon_example`` and
``epsilon_client`` with their deltas, never one merged epsilon) and ``summary.md`` (the figure, the
run's defenses, and the same table)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from adversary.privacy_audit.auditor import audit_result_text, audit_warning, canary_text, one_shot_text
from fedsim.core.atomic import inside
from fedsim.reporting.render import markdown_table
from fedsim.reporting.tables import CENTRAL_DP, defense_settings, parameter_text, round_privacy
from fedsim.rundir.layout import RUN_ROUNDS_TABLE, RUN_SUMMARY, RUN_UTILITY_FIGURE
from fedsim.rundir.privacy import PRIVACY_COLUMNS
from fedsim.rundir.reader import Run
from fedsim.rundir.writer import RunStore

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

TABLE_COLUMNS = (
    "round",
    "loss",
    "accuracy",
    "precision",
    "recall",
    "specificity",
    "f1",
    "mcc",
    "clients_ok",
    "clients_failed",
    *PRIVACY_COLUMNS,
)


def round_table(run: Run) -> list[dict[str, object]]:
    """One row per evaluated round, its values as recorded ("" where absent), and the privacy spent by then
    (each epsilon and its delta; "" where that mechanism is not in force)."""
    spent = round_privacy(run)
    return [
        {column: row.get(column, "") for column in TABLE_COLUMNS} | _spent_by(spent, row["round"])
        for row in RunStore(run.path).rows()
        if row["event"] == "eval"
    ]


def _spent_by(spent: pd.DataFrame, server_round: int) -> dict[str, object]:
    if server_round not in spent.index:
        return dict.fromkeys(PRIVACY_COLUMNS, "")
    return {column: "" if pd.isna(value) else float(value) for column, value in spent.loc[server_round].items()}


def defense_lines(config: ExperimentConfig) -> list[str]:
    """The run's defenses as Markdown bullets, the configuration-level ones (local steps, dropout) included."""
    settings = defense_settings(config)
    lines = [f"- `{name}`: {parameter_text(params)}" for name, params in settings if name != CENTRAL_DP]
    lines = lines or ["- no client defense"]
    client = config.client
    steps = f"{client.local_steps} step(s)" if client.local_steps is not None else f"{client.local_epochs} epoch(s)"
    lines.append(f"- local training: {steps} per round (lr {client.lr}, batch {client.batch_size}, {client.optimizer})")
    lines.append(f"- model dropout: {getattr(config.model, 'dropout', 0.0)}")  # tv:* models take none
    lines += [
        f"- central DP (`strategy.dp`): {parameter_text(params)}" for name, params in settings if name == CENTRAL_DP
    ]
    return lines


def audit_lines(summary: dict[str, Any] | None) -> list[str]:
    """The privacy audit's bound beside the accountant's epsilon (``adversary.privacy_audit``), as Markdown lines."""
    audit = (summary or {}).get("audit")
    if not audit:
        return []
    claimed = audit.get("epsilon_example", audit.get("epsilon_client"))
    guesses = f"{audit['audit_correct']} of {audit['audit_guesses']} guesses right"
    lines = [f"- lower bound on epsilon: {audit_result_text(audit)}"]
    if "audit_fdp_epsilon_lower" in audit:  # runs audited before the f-DP analysis have only epsilon-delta
        lines.append(
            "- the epsilon-delta bound assumes nothing about the mechanism; the f-DP one assumes its trade-off curve "
            "is Gaussian"
        )
        guesses += f" (f-DP's best count: {audit['audit_fdp_correct']} of {audit['audit_fdp_guesses']})"
    lines += [
        f"- {audit['audit_adjacency']} level, {audit['audit_threat_model']}: {guesses} about {canary_text(audit)}",
        f"- accountant's epsilon: {'none claimed' if claimed is None else f'{claimed:.2f}'}",
        f"- the audited model is the released one ({audit['audit_model']})",
    ]
    estimate = one_shot_text(audit)
    lines += [f"- {estimate}"] if estimate else []
    warning = audit_warning(audit)
    return lines + ([f"- **{warning}**"] if warning else [])


def write_run_summary(run: Run, out: Path, utility_figure: Path) -> list[Path]:
    """Write ``utility.png`` (a copy of ``utility_figure``), ``summary.md`` and ``rounds.csv`` under ``out``."""
    table = round_table(run)
    # the run's own directory is the one these files must stay inside
    png, markdown, rounds = (
        inside(run.path, out / name) for name in (RUN_UTILITY_FIGURE, RUN_SUMMARY, RUN_ROUNDS_TABLE)
    )
    shutil.copyfile(utility_figure, png)
    with open(rounds, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    defenses = "\n".join(defense_lines(run.config))
    audit = "\n".join(audit_lines(run.summary))
    markdown.write_text(
        f"# {run.name}\n\n![utility over rounds]({RUN_UTILITY_FIGURE})\n\n## Defenses\n\n{defenses}\n\n"
        + (f"## Privacy audit\n\n{audit}\n\n" if audit else "")
        + f"## Rounds\n\n{markdown_table(pd.DataFrame(table, columns=list(TABLE_COLUMNS)))}"
    )
    return [png, markdown, rounds]
