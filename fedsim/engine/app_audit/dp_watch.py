"""The app's DP as the audit runs: what its nodes and its server were found doing, written as ``app_dp`` rows as each
round ends, claims its measured noise contradicts said at once in one loud line each, and the whole in the summary.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig, parse_config
from fedsim.engine.app_audit.data_canaries import DataCanaries
from fedsim.engine.app_audit.dp import (
    DP_EVENT,
    as_defenses,
    dp_summary,
    finding_rows,
    local_dp_contradiction,
    mods_found,
    refusal_line,
    strategy_found,
    strategy_spent,
    unadapted_line,
)
from fedsim.engine.app_audit.notes import Notes
from fedsim.engine.app_audit.privacy_audit import AUDIT_EVENT, AppPrivacyAudit, finish_audit
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")

NOTES_FOLDER = "app_dp_notes"  # RUN_DIR/app_dp_notes: what each node's process noted (client_probe)


def with_found_defenses(config: ExperimentConfig, client_app: Any) -> tuple[ExperimentConfig, list[dict[str, Any]]]:
    """``config`` whose ``client.defenses`` hold the DP the ClientApp's mods apply (``LocalDpMod``), so that the
    attacks adapt to it, and the findings; a defense the audit config declares itself is kept as declared."""
    found = mods_found(client_app)
    declared = {defense.name for defense in config.client.defenses}
    added = [defense for defense in as_defenses(found) if defense["name"] not in declared]
    for finding in found:
        logger.info(
            "the app's ClientApp applies LocalDpMod (clipping norm %g, sensitivity %g, epsilon %g, delta %g): the "
            "attacks know it as client defenses %s",
            finding["clipping_norm"],
            finding["sensitivity"],
            finding["epsilon"],
            finding["delta"],
            ", ".join(defense["name"] for defense in as_defenses([finding])),
        )
    if not added:
        return config, found
    raw = config.model_dump(mode="json")
    raw["client"]["defenses"] = [*raw["client"]["defenses"], *added]
    return parse_config(raw), found


class DpWatch:
    """Collects what the app's DP was found doing (``fedsim.engine.app_audit.dp``) into the run's rows."""

    def __init__(self, store: RunStore, declared: list[str], privacy_audit: AppPrivacyAudit | None = None) -> None:
        """``privacy_audit``: the app's canary audit, whose bounds the summary holds beside the app's claims."""
        self.store = store
        self.privacy_audit = privacy_audit
        self.notes = Notes(Path(store.run_dir) / NOTES_FOLDER)
        self._declared = declared
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
        summary["unadapted"] = unadapted_line(found, self._declared)
        if self.privacy_audit is not None:
            bounds = finish_audit(self.privacy_audit, found, self.notes.step_counts())
            last = max((int(row["round"]) for row in rows if row.get("event") == "eval"), default=0)
            for fields in bounds:
                self.store.append({"round": last, "event": AUDIT_EVENT, **fields})
            summary["privacy_audit"] = {str(fields["client"]): fields for fields in bounds}
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
