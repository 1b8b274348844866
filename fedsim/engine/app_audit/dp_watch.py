"""The app's DP as the audit runs: what its nodes and its server were found doing, written as ``app_dp`` rows as each
round ends, claims its measured noise contradicts said at once in one loud line each, and the whole in the summary.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig, parse_config
from fedsim.engine.app_audit.client_canaries import ClientLevelAudit
from fedsim.engine.app_audit.client_probe import LOCAL_DP
from fedsim.engine.app_audit.data_canaries import DataCanaries
from fedsim.engine.app_audit.dp import (
    DP_EVENT,
    as_defenses,
    dp_summary,
    finding_rows,
    local_dp_contradiction,
    mods_found,
    most_exposed,
    noise_of,
    refusal_line,
    strategy_found,
    strategy_spent,
    unadapted_line,
)
from fedsim.engine.app_audit.dry_probe import DryProbe
from fedsim.engine.app_audit.notes import Notes
from fedsim.engine.app_audit.privacy_audit import AUDIT_EVENT, AppPrivacyAudit, finish_audit
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")

NOTES_FOLDER = "app_dp_notes"  # RUN_DIR/app_dp_notes: what each node's process noted (client_probe)


def with_found_defenses(
    config: ExperimentConfig, client_app: Any, probe: DryProbe | None = None
) -> tuple[ExperimentConfig, list[dict[str, Any]]]:
    """``config`` whose ``client.defenses`` hold the DP found before the run, so that the attacks adapt to it: the
    ClientApp's mods (``LocalDpMod``) and what the dry call of its first round (``probe``) found on each node (Opacus'
    DP-SGD, a client-side clipping wrapper). Where nodes differ, the attacks know the least noise of any node (the
    most exposed); a defense the audit config declares itself is kept as declared. Returns the config and what was
    added, each with where it was found and each node's noise (``summary.json``'s ``app_dp.attacks_adapted_to``)."""
    found = [{**finding, "found_by": "the ClientApp's mods"} for finding in mods_found(client_app)]
    if probe is not None:
        found += [
            {**finding, "client": client, "found_by": "a dry call of the app's first round"}
            for client, findings in sorted(probe.findings.items())
            for finding in findings
        ]
        found += [{**finding, "found_by": "the app's server, started dry"} for finding in probe.strategies]
    for finding in found:
        if finding["mechanism"] == LOCAL_DP:
            logger.info(
                "the app's ClientApp applies LocalDpMod (clipping norm %g, sensitivity %g, epsilon %g, delta %g)",
                *(finding[key] for key in ("clipping_norm", "sensitivity", "epsilon", "delta")),
            )
    declared = {defense.name for defense in config.client.defenses}
    chosen = most_exposed(as_defenses(found))
    added = [
        {
            "defense": defense,
            "found_by": sorted({f["found_by"] for f in found if _gives(f, name)}),
            "nodes": {str(f["client"]): noise_of(d) for f in found if "client" in f for d in _named(f, name)},
        }
        for name, defense in chosen.items()
        if name not in declared
    ]
    for record in added:
        record["line"] = adapted_line(record)
        logger.info(record["line"])
    if not added:
        return config, added
    # only what was set: an option re-parsed as set would be taken as the config's own, and not adapted
    raw = config.model_dump(mode="json", exclude_unset=True)
    client = raw.setdefault("client", {})
    client["defenses"] = [*client.get("defenses", []), *(record["defense"] for record in added)]
    return parse_config(raw), added


def _named(finding: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [defense for defense in as_defenses([finding]) if defense["name"] == name]


def _gives(finding: dict[str, Any], name: str) -> bool:
    return bool(_named(finding, name))


def adapted_line(record: dict[str, Any]) -> str:
    """One line: a defense the attacks adapt to, where it was found, and each node's noise where nodes differ."""
    defense = record["defense"]
    settings = ", ".join(
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in defense.items() if k != "name"
    )
    nodes = record["nodes"]
    differ = len(set(nodes.values())) > 1
    per_node = (
        "; the nodes' noise: "
        + ", ".join(f"node {client} {noise:g}" for client, noise in nodes.items())
        + " (the attacks know the least: the node most exposed)"
        if differ
        else ""
    )
    return (
        f"the attacks adapt to client defense {defense['name']} ({settings}), found before the run by "
        f"{' and '.join(record['found_by'])}{per_node}"
    )


def dry_probe_line(probe: DryProbe) -> str | None:
    """One line where the dry call did not reach every node's training (None where it did)."""
    if probe.unfinished is None:
        return None
    return (
        f"the dry call of the app's first round ended before it saw the nodes' training ({probe.unfinished}): DP set "
        f"up inside their training is found as they train, and the attacks do not know it"
    )


class DpWatch:
    """Collects what the app's DP was found doing (``fedsim.engine.app_audit.dp``) into the run's rows."""

    def __init__(
        self,
        store: RunStore,
        declared: list[str],
        privacy_audit: AppPrivacyAudit | None = None,
        adapted: list[dict[str, Any]] | None = None,
        client_level: ClientLevelAudit | None = None,
    ) -> None:
        """``declared``: the client defenses the attacks knew; ``privacy_audit``: the app's canary audit, whose
        bounds the summary holds beside the app's claims; ``adapted``: the defenses found before the run that the
        attacks adapted to (``with_found_defenses``); ``client_level``: canary clients through the app's own
        ``LocalDpMod`` or server-side DP wrapper, run at the end (None: no privacy audit)."""
        self.store = store
        self.privacy_audit = privacy_audit
        self.notes = Notes(Path(store.run_dir) / NOTES_FOLDER)
        self._declared = declared
        self._adapted = list(adapted or [])
        self._client_level = client_level
        self._turned = 0  # the notes' calls already written as rows
        self._strategies: list[Any] = []
        self._refusal_said = False
        self._lock = threading.Lock()

    @property
    def canaries(self) -> DataCanaries | None:
        """What the nodes' probes add to the app's training data (None without a privacy audit)."""
        return self.privacy_audit.data if self.privacy_audit is not None else None

    def strategy_started(self, strategy: Any) -> None:
        """The app's server started a strategy: a DP wrapper is recorded with its parameters (round 0)."""
        finding = strategy_found(strategy)
        if finding is None:
            return
        self._strategies.append(strategy)
        logger.info(
            "the app's server wraps its strategy in %s (%s)",
            finding["mechanism"],
            ", ".join(f"{k} {v}" for k, v in finding.items() if k not in ("mechanism",)),
        )
        self.store.append({"round": 0, "event": DP_EVENT, **finding})

    def round_done(self) -> None:
        """What the nodes noted so far, as rows; each contradicted claim in one loud line."""
        self.notes.refresh()
        with self._lock:
            calls, self._turned = self.notes.calls[self._turned :], len(self.notes.calls)
        for row in finding_rows(calls):
            self.store.append({**row, "event": DP_EVENT})
            line = local_dp_contradiction(row)
            if line is not None:
                logger.warning(line)
            refused = refusal_line(row)
            if refused is not None and not self._refusal_said:  # the same on every node and round: said once
                self._refusal_said = True
                logger.warning(refused)

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``app_dp``: mechanisms per client, the app's epsilon claims, contradicted claims, and
        the epsilon a DP wrapper's own accountant reports."""
        self.round_done()
        rows = self.store.rows()
        summary = dp_summary(rows)
        for strategy in self._strategies:
            spent = strategy_spent(strategy)
            if spent is not None:
                summary.setdefault("server_accountant", []).append({"mechanism": type(strategy).__name__, **spent})
        found = [row for row in rows if row.get("event") == DP_EVENT]
        summary["attacks_adapted_to"] = self._adapted
        summary["unadapted"] = unadapted_line(found, self._declared)
        if self.privacy_audit is not None:
            bounds = finish_audit(self.privacy_audit, found, self.notes.step_counts())
            last = max((int(row["round"]) for row in rows if row.get("event") == "eval"), default=0)
            for fields in bounds:
                self.store.append({"round": last, "event": AUDIT_EVENT, **fields})
            summary["privacy_audit"] = {str(fields["client"]): fields for fields in bounds}
        if self._client_level is not None:
            client_bounds = self._client_level.run(self._strategies)
            last = max((int(row["round"]) for row in rows if row.get("event") == "eval"), default=0)
            for fields in client_bounds:
                self.store.append({"round": last, "event": AUDIT_EVENT, **fields})
            summary["privacy_audit_client"] = client_bounds
        return summary


def log_dp_summary(summary: dict[str, Any]) -> None:
    """The app's DP in a few lines at the end of the audit."""
    for mechanism, per_client in summary["mechanisms"].items():
        settings = "; ".join(
            f"{client}: " + ", ".join(f"{k} {v}" for k, v in sorted(values.items()) if not isinstance(v, list))
            for client, values in per_client.items()
        )
        logger.info("the app's DP found: %s (%s)", mechanism, settings)
    for client, claims in summary["epsilon_claims"].items():
        logger.info(
            "the app's own epsilon claim, client %s: %s", client, ", ".join(f"{k} {v:.4g}" for k, v in claims.items())
        )
    for client, spent in summary.get("opacus_accountant", {}).items():
        logger.info(
            "the app's Opacus accountant, client %s: epsilon %.4g at delta %g (over the %d DP-SGD steps it saw)",
            client,
            spent["epsilon"],
            spent["delta"],
            spent.get("accountant_steps", 0),
        )
    for spent in summary.get("server_accountant", []):
        logger.info(
            "the app's %s accountant: epsilon %.4g, delta %g (client level)",
            spent["mechanism"],
            spent["claimed_epsilon_client"],
            spent["claimed_delta_client"],
        )
    for line in summary["contradicted"][:1]:  # said per round as it happened; once more at the end
        logger.warning(line)
    if summary["unadapted"]:
        logger.warning(summary["unadapted"])
