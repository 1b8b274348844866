"""The report's section on an audited Flower app's own DP (``fedsim audit``, ``summary.json``'s ``app_dp``): what was
found per node (Opacus' DP-SGD, Flower's ``LocalDpMod``, its DP strategy wrappers) with its settings, the epsilon the
app claims for each node, and where the run had ``adversary.privacy_audit`` the lower bound measured beside it.
Claims the measurements contradict are said in bold, once each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from adversary.privacy_audit.auditor import audit_warning
from adversary.privacy_audit.bound import EPSILON_DELTA
from fedsim.engine.app_audit.client_canaries import client_level_contradiction, client_level_line
from fedsim.reporting.render import ReportSection, Table, Text
from fedsim.reporting.runs_sections import short_name
from fedsim.rundir.sweep_reader import Sweep

#: the settings of a finding shown in the table (the rest stay in summary.json)
SHOWN = ("noise_multiplier", "max_grad_norm", "clipping_norm", "sensitivity", "epsilon", "delta", "noise_std_measured")


def app_dp_of(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run summary's ``app_dp`` (None for a run that is not an app audit)."""
    found = (summary or {}).get("app_dp")
    return found if isinstance(found, dict) else None


def claimed_text(app_dp: Mapping[str, Any]) -> str | None:
    """The app's own epsilon per node in a few words (None where it claims none), for the summary's epsilon cell."""
    claims = app_dp.get("epsilon_claims") or {}
    parts = [
        f"node {client}: {value:.3g}" if key == "epsilon" else f"node {client}: {key} {value:.3g}"
        for client, named in sorted(claims.items())
        for key, value in named.items()
    ]
    return f"the app claims {', '.join(parts)}" if parts else None


def node_rows(run_name: str, app_dp: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per node and mechanism found: its settings, the app's claim, the audit's bound beside it."""
    bounds = app_dp.get("privacy_audit") or {}
    claims = app_dp.get("epsilon_claims") or {}
    rows = []
    accountant = app_dp.get("opacus_accountant") or {}
    for mechanism, per_client in (app_dp.get("mechanisms") or {}).items():
        for client, settings in sorted(per_client.items()):
            claim = _claim_text(claims.get(client, {}), accountant.get(client))
            rows.append(_row(run_name, client, mechanism, settings, claim, bounds.get(client)))
    covered = {row["node"] for row in rows}
    for client, fields in sorted(bounds.items()):  # audited nodes that were found using no DP
        if client not in covered:
            claim = _claim_text(claims.get(client, {}), accountant.get(client))
            rows.append(_row(run_name, client, "none found", {}, claim, fields))
    return rows


def _row(
    run_name: str,
    client: str,
    mechanism: str,
    settings: Mapping[str, Any],
    claim: str,
    bound: Mapping[str, Any] | None,
) -> dict[str, Any]:
    shown = ", ".join(f"{key} {settings[key]:.3g}" for key in SHOWN if isinstance(settings.get(key), int | float))
    row: dict[str, Any] = {
        "run": run_name,
        "node": client,
        "DP found": mechanism,
        "settings": shown,
        "app's own epsilon": claim,
    }
    if bound is not None:
        analysis = bound["audit_result_analysis"]
        if analysis != EPSILON_DELTA:  # the f-DP bound is the result: the one that assumes nothing beside it
            analysis += f"; {EPSILON_DELTA} {bound['audit_epsilon_lower']:.2f}"
        row["audit lower bound (example level)"] = (
            f"{bound['audit_epsilon_result']:.2f} ({analysis}) at {bound['audit_confidence']:.0%}, "
            f"delta {bound['audit_delta']:g}"
        )
        row["canaries"] = (
            f"{bound['audit_correct']} of {bound['audit_guesses']} guesses right of {bound['audit_canaries']}"
        )
        if bound.get("epsilon_example") is None:
            row["claim"] = "none to check"
        else:
            row["claim"] = "contradicted" if audit_warning(bound) else "not contradicted"
    return row


def _claim_text(claims: Mapping[str, float], accountant: Mapping[str, Any] | None) -> str:
    """The app's own epsilon as it reported it, with the delta it asked Opacus' accountant for, where it asked."""
    text = ", ".join(f"{key} {value:.3g}" for key, value in claims.items()) or "none claimed"
    if accountant is not None:
        text += f" (Opacus' accountant: delta {accountant['delta']:g}, {accountant.get('accountant_steps', 0)} steps)"
    return text


def app_dp_section(sweep: Sweep) -> ReportSection | None:
    """The section, where some run is an audited app (None otherwise)."""
    found = {name: dp for name, run in sweep.runs.items() if (dp := app_dp_of(run.summary)) is not None}
    if not found:
        return None
    rows = [row for name, dp in found.items() for row in node_rows(short_name(sweep.runs[name]), dp)]
    blocks: list = [
        Text(
            "The audited app's own DP, found where it acts (not declared): per node, the mechanism and its settings, "
            "the epsilon the app itself reports, and where the run had `adversary.privacy_audit` the lower bound "
            "measured from the node's updates as sent (adjacency: add/remove one training example of that node; "
            "canary examples entered through the app's data function). A lower bound never ranks mechanisms; a bound "
            "above the claim contradicts it."
        )
    ]
    blocks.append(Table(pd.DataFrame(rows)) if rows else Text("No DP was found in the audited app."))
    for name, dp in found.items():
        loud = [*dp.get("contradicted", [])]
        loud += [warning for fields in (dp.get("privacy_audit") or {}).values() if (warning := audit_warning(fields))]
        loud += [line for fields in dp.get("privacy_audit_client", []) if (line := client_level_contradiction(fields))]
        # client level: canary clients through the app's own LocalDpMod or server-side wrapper, one release each
        blocks += [
            Text(f"{short_name(sweep.runs[name])}: {client_level_line(f)}.") for f in dp.get("privacy_audit_client", [])
        ]
        blocks += [Text(f"**{short_name(sweep.runs[name])}: {line}**") for line in loud]
        for spent in dp.get("server_accountant", []):
            blocks.append(
                Text(
                    f"{short_name(sweep.runs[name])}: the app's {spent['mechanism']} accountant reports epsilon "
                    f"{spent['claimed_epsilon_client']:.3g} at delta {spent['claimed_delta_client']:g} (client level)."
                )
            )
        for record in dp.get("attacks_adapted_to", []):  # the DP found before the run, which the attacks knew
            blocks.append(Text(f"{short_name(sweep.runs[name])}: {record['line']}."))
        if dp.get("unadapted"):
            blocks.append(Text(f"{short_name(sweep.runs[name])}: {dp['unadapted']}"))
    return ReportSection("The app's DP", blocks)
