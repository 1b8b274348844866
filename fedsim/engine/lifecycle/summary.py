"""The end of a run: its summary (``summary.json``) from the metrics rows, and whether it trained at all.

``summary.json`` is read back by ``fedsim sweep`` (is a point complete?) and ``fedsim.load_run``; a run in
which no round updated the global model fails with the reason ``rounds_without_update`` gives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from adversary.privacy_audit.auditor import audit_result_text, one_shot_text
from fedsim.config import FederationConfig
from fedsim.config.federation import PlateauConfig
from fedsim.core.plateau import Plateau, first_reaching, plateau_of
from fedsim.rundir.layout import CLIENT_ERROR_LOG, METRICS_FILE
from fedsim.rundir.privacy import (
    ADJACENCY,
    DELTA_CLIENT,
    DELTA_EXAMPLE,
    EPSILON_CLIENT,
    EPSILON_EXAMPLE,
    epsilon_text,
    privacy_spent,
)
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")


def summarize(
    store: RunStore,
    wall_seconds: float,
    federation: FederationConfig | None = None,
    last_attacked_round: int = 0,
) -> dict[str, Any]:
    """What ``summary.json`` holds: the final and best scores, client failures, the privacy spent and leakage
    per attack.

    The privacy spent is ``epsilon_example`` / ``delta_example`` (DP-SGD, add/remove one sample of a client) and
    ``epsilon_client`` / ``delta_client`` (``strategy.dp``, add/remove one client), None where that mechanism is
    not in force (``fedsim.rundir.privacy``). With the run's ``federation`` section: its plateau and rounds to the
    target accuracy (``utility_summary``; ``last_attacked_round``: see ``training_plateau``)."""
    rows = store.rows()
    evals = [r for r in rows if r["event"] == "eval"]
    fits = [r for r in rows if r["event"] == "fit"]
    final = evals[-1] if evals else {}
    return {
        "run_dir": str(store.run_dir),
        "rounds_completed": final.get("round", 0),
        "final": {
            k: final[k] for k in ("loss", "accuracy", "precision", "recall", "specificity", "f1", "mcc") if k in final
        },
        # an audited app's own evaluation of a round fedsim did not score (its round 0) has no accuracy of fedsim's
        "best_accuracy": max((r["accuracy"] for r in evals if r.get("accuracy") is not None), default=None),
        **(utility_summary(federation, last_attacked_round, rows) if federation is not None else {}),
        "client_updates": len(fits),
        "client_failures": sum(1 for r in fits if r.get("status") == "failed"),
        **privacy_spent(rows),
        "leakage": leakage_summary([r for r in rows if r["event"] == "attack"]),
        # adversary.privacy_audit: the lower bound beside the accountant's epsilon (epsilon_example / epsilon_client)
        **({"audit": audit_summary(audits[-1])} if (audits := [r for r in rows if r["event"] == "audit"]) else {}),
        "wall_seconds_last_session": round(wall_seconds, 2),
    }


def accuracy_by_round(rows: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(round, test accuracy) of every evaluated round in order; a round played again counts once, its last row."""
    by_round = {r["round"]: r["accuracy"] for r in rows if r["event"] == "eval" and r.get("accuracy") is not None}
    return sorted(by_round.items())


def training_plateau(
    criterion: PlateauConfig | None, last_attacked: int, rows: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Where ``federation.plateau`` holds: its ``round``, the ``accuracy`` at the plateau (``fedsim.core.plateau``),
    the ``best_accuracy`` by then and its ``best_round``; None when the criterion is off or does not hold yet.
    It never holds before ``last_attacked`` (``adversary.last_attacked_round()``): the attacks of a run that stops at
    its plateau all happen."""
    if criterion is None:
        return None
    evaluated = accuracy_by_round(rows)
    not_before = next((index for index, (r, _) in enumerate(evaluated) if r >= last_attacked), len(evaluated))
    plateau: Plateau | None = plateau_of(
        [accuracy for _, accuracy in evaluated], criterion.patience, criterion.min_delta, not_before
    )
    if plateau is None:
        return None
    return {
        "round": evaluated[plateau.index][0],
        "accuracy": plateau.accuracy,
        "best_round": evaluated[plateau.best_index][0],
        "best_accuracy": plateau.best_accuracy,
    }


def utility_summary(federation: FederationConfig, last_attacked: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The plateau (round reached, accuracy there) under ``federation.plateau`` and the first round reaching
    ``federation.target_accuracy``, each None where it is off or was not reached."""
    summary: dict[str, Any] = {}
    if federation.plateau is not None:
        summary["plateau"] = training_plateau(federation.plateau, last_attacked, rows)
    target = federation.target_accuracy
    if target is not None:
        evaluated = accuracy_by_round(rows)
        reached = first_reaching([accuracy for _, accuracy in evaluated], target)
        summary["target_accuracy"] = target
        summary["rounds_to_target"] = None if reached is None else evaluated[reached][0]
    return summary


def leakage_summary(attack_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean PSNR / SSIM / label accuracy per attack, per client versus aggregate, over all attacked rounds."""
    summary: dict[str, Any] = {}
    for row in attack_rows:
        if row.get("status") != "ok":
            continue
        kind = "aggregate" if row["target"] == "aggregate" else "per-client"
        summary.setdefault(row["attack"], {}).setdefault(kind, []).append(row)
    return {
        attack: {
            kind: {
                "targets": len(group),
                **{
                    metric: _mean([r[metric] for r in group if r.get(metric) is not None])
                    for metric in ("psnr_mean", "ssim_mean", "lpips_mean", "label_accuracy")
                },
            }
            for kind, group in kinds.items()
        }
        for attack, kinds in summary.items()
    }


def audit_summary(row: dict[str, Any]) -> dict[str, Any]:
    """The `audit` row's fields (the bound, its confidence, delta and adjacency, the accountant's epsilon)."""
    return {key: value for key, value in row.items() if key.startswith(("audit_", "epsilon_"))}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rounds_without_update(store: RunStore, after: int, withheld: Callable[[int], bool] = lambda r: False) -> str | None:
    """Why the rounds played after round ``after`` trained nothing, or None when at least one did (rounds a
    malicious server ``withheld`` on purpose do not count)."""
    played = [
        row for row in store.rows() if row["event"] == "eval" and row["round"] > after and not withheld(row["round"])
    ]
    if not played or any(row.get("model_updated", True) for row in played):
        return None
    errors = sorted({row["error"] for row in played if row.get("error")})
    why = f" ({'; '.join(errors)})" if errors else ": every client update failed or was refused"
    return f"no round updated the global model in rounds {played[0]['round']}-{played[-1]['round']}{why}"


def log_summary(summary: dict[str, Any]) -> None:
    """The run's result in a line or two of the log (client failures pointing to their tracebacks)."""
    final = summary["final"]
    app_scores = summary.get("app_evaluation")  # an audited Flower app's own numbers (fedsim.engine.app_audit)
    if app_scores:
        listed = ", ".join(f"{name} {value:.4g}" for name, value in app_scores.items())
        logger.info("finished %d rounds: the app's own evaluation: %s", summary["rounds_completed"], listed)
    if "accuracy" not in final:  # no score of fedsim's to print, not a NaN one
        if not app_scores:
            logger.info("finished %d rounds: no evaluated round", summary["rounds_completed"])
    else:
        loss = f", loss {final['loss']:.4f}" if "loss" in final else ""
        logger.info(
            "finished %d rounds: test accuracy %.4f (best %.4f)%s",
            summary["rounds_completed"],
            final["accuracy"],
            summary["best_accuracy"],
            loss,
        )
    for epsilon, delta in ((EPSILON_EXAMPLE, DELTA_EXAMPLE), (EPSILON_CLIENT, DELTA_CLIENT)):
        if summary.get(epsilon) is not None:
            logger.info(
                "privacy spent: %s = %s, %s",
                epsilon,
                epsilon_text(summary[epsilon], summary[delta]),
                ADJACENCY[epsilon],
            )
    audit = summary.get("audit")
    if audit:
        claimed = audit.get("epsilon_example", audit.get("epsilon_client"))
        logger.info(
            "privacy audit (%s level, %s): %s; accountant's epsilon %s",
            audit["audit_adjacency"],
            audit["audit_threat_model"],
            audit_result_text(audit),
            "none" if claimed is None else f"{claimed:.2f}",
        )
        if one_shot_text(audit):
            logger.info("privacy audit: %s", one_shot_text(audit))
    if summary["client_failures"]:
        logger.warning(
            "%d of %d client updates failed; reasons in %s, tracebacks in %s/%s",
            summary["client_failures"],
            summary["client_updates"],
            METRICS_FILE,
            summary["run_dir"],
            CLIENT_ERROR_LOG,
        )
