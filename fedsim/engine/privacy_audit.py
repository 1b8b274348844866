"""``adversary.privacy_audit`` wired into one run: canaries into the training, a tap for the auditor, the bound at
the end.

Example level (neither ``strategy.dp`` nor SecAgg+): the host client inserts Dirac canaries (``clients.client_app``
gets them in its spec) and a wire tap hands the auditor the host's updates as sent. Client level: under
``strategy.dp`` the canary clients' updates join the clipped sum inside the DP wrapper
(``strategies.dp.FixedDenominatorMean.inserted``), before the noise; under SecAgg+ the sampled clients carry them
inside the vectors they mask (``adversary.privacy_audit.canaries.CarriedCanaries``; the strategy hands out the
slots), each with the weight of the federation's mean partition. Either way a strategy tap hands the auditor every
aggregate the server releases (noised, or unmasked). The per-round scores are saved
with each committed round (``AUDIT_SCORES_FILE``), so ``--resume`` continues the audit. When the run ends, an
``audit`` row (and ``summary.json``'s ``audit``) holds both bounds (epsilon-delta and f-DP) beside the
accountant's epsilon, at client level with Andrew et al.'s one-shot estimate, and one warning line says so when
a bound exceeds the accountant's epsilon.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from flwr.serverapp import Grid
from torch import nn

from adversary.privacy_audit.auditor import RunAuditor, audit_fields, audit_warning
from adversary.privacy_audit.canaries import ExampleCanaries
from adversary.privacy_audit.config import (
    CLIENT,
    EXAMPLE,
    AuditConfig,
    audit_delta,
    audit_level,
    canary_norm,
    gaussian_mechanism,
)
from adversary.taps import every_round
from fedsim.core.seeding import derive_seed
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.protocols import Protocol
from fedsim.rundir.writer import RunStore
from strategies.dp import FedsimDp, FixedDenominatorMean
from strategies.secagg import SecAggPlusFedAvg

logger = logging.getLogger("fedsim")

AUDIT_SCORES_FILE = "audit_scores.json"
AUDIT_EVENT = "audit"


@dataclass
class PrivacyAuditWiring:
    auditor: RunAuditor
    store: RunStore
    level: str
    wrap_grid: Callable[[Grid], Grid] | None
    wrap_strategy: Callable[[Any], Any]
    initial: dict[str, Any]
    gaussian: bool  # the mechanism claims Gaussian noise: the f-DP bound may be the result

    def round_finished(self, server_round: int) -> None:
        """Save the scores with the round (a round hook: runs just before the round's commit)."""
        self.store.write_json(AUDIT_SCORES_FILE, self.auditor.state())

    def finish(self) -> dict[str, Any] | None:
        """Compute the bound, record the `audit` row, warn when it exceeds the accountant's epsilon."""
        last = self.store.last_committed_round()
        if not last:
            return None
        rows = self.store.rows()
        result, estimate = self.auditor.outcome(self.initial, self.store.load_checkpoint(last))
        config = self.auditor.config
        claimed = claimed_epsilon(rows, self.level, config.host)
        fields = audit_fields(
            result,
            self.level,
            config.threat_model,
            claimed,
            estimate,
            canary_norm=self.auditor.norm,
            canary_weight=self.auditor.canary_weight,
            gaussian=self.gaussian,
        )
        self.store.append({"round": last, "event": AUDIT_EVENT, **fields})
        warning = audit_warning(fields)
        if warning is not None:
            logger.warning(warning)
        return fields


def claimed_epsilon(rows: list[dict[str, Any]], level: str, host: int) -> float | None:
    """The accountant's epsilon at the end: the host's dpsgd epsilon (example level) or the DP strategy's."""
    if level == CLIENT:
        spent = [row["dp_epsilon"] for row in rows if row["event"] == "eval" and row.get("dp_epsilon") is not None]
    else:
        spent = [
            row["defense.dpsgd.epsilon"]
            for row in rows
            if row["event"] == "fit" and row.get("client") == host and row.get("defense.dpsgd.epsilon") is not None
        ]
    return float(spent[-1]) if spent else None


def mean_partition(federation: Federation) -> float:
    """A canary client's weight under SecAgg+: the examples of the federation's average client."""
    return float(sum(len(partition) for partition in federation.partitions) / len(federation.partitions))


@dataclass(frozen=True)
class PrivacyAuditPieces:
    """What the privacy audit of a run is built from, taken out of the run's config by its composition root
    (``fedsim.engine.assembly.privacy_audit_of``)."""

    audit: AuditConfig  # the run's ``adversary.privacy_audit``
    dp: Any | None  # ``strategy.dp`` (None: off)
    secagg: Any | None  # ``strategy.secagg`` (None: off)
    defenses: Sequence[Any]  # ``client.defenses``
    lr: float  # ``client.lr``
    model: nn.Module  # the run's initial global model (its weights: those of round 0)
    seed: int  # the run's seed
    protocol: Protocol  # how the strategy's rounds travel: what each tap sees


def attach_privacy_audit(
    pieces: PrivacyAuditPieces, federation: Federation, store: RunStore, committed: int
) -> PrivacyAuditWiring:
    """The configured audit, its taps and canary clients; ``committed``: a resumed run's last committed round."""
    audit, dp, defenses = pieces.audit, pieces.dp, pieces.defenses
    level = audit_level(dp, pieces.secagg)
    model = pieces.model
    seed, examples = derive_seed(pieces.seed, "audit"), None
    if audit.threat_model == "black-box":  # the canary examples as the host holds them: its normalisation
        dataset = federation.dataset
        images = federation.client_stats[audit.host].normalize(torch.from_numpy(dataset.x_test))
        plan = ExampleCanaries(audit.canaries, 0.0, audit.host, seed, examples=True)
        examples = plan.example_set(images, torch.from_numpy(dataset.y_test), dataset.num_classes)
    auditor = RunAuditor(
        audit,
        level,
        copy.deepcopy(model),
        seed=seed,
        norm=canary_norm(audit, dp, defenses, level),
        delta=audit_delta(dp, defenses, level),
        lr=pieces.lr,
        examples=examples,
    )
    if committed and (store.run_dir / AUDIT_SCORES_FILE).is_file():
        auditor.restore(store.read_json(AUDIT_SCORES_FILE), committed)
    protocol = pieces.protocol
    layout = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    initial = {name: value.detach().clone() for name, value in model.state_dict().items()}
    white_box = audit.threat_model == "white-box"  # the others read the final model only: no tap
    gaussian = gaussian_mechanism(dp, defenses, level)
    if level == EXAMPLE:
        tap = (lambda grid: protocol.wire_tap(grid, auditor.observe, every_round, layout)) if white_box else None
        return PrivacyAuditWiring(auditor, store, level, tap, lambda strategy: strategy, initial, gaussian)

    def with_canary_clients(strategy: Any) -> Any:
        if isinstance(strategy, SecAggPlusFedAvg):  # the sampled clients carry the canary clients
            strategy.canary_weight = auditor.canary_weight = mean_partition(federation)
        else:
            inner = strategy.strategy if isinstance(strategy, FedsimDp) else None
            if not isinstance(inner, FixedDenominatorMean):
                raise TypeError(
                    "adversary.privacy_audit at client level needs strategy.dp with the fixed-denominator estimator, "
                    "or secagg+"
                )
            inner.inserted = auditor.inserted_updates(initial)
        return protocol.strategy_tap(strategy, auditor.observe, every_round, layout) if white_box else strategy

    return PrivacyAuditWiring(auditor, store, level, None, with_canary_clients, initial, gaussian)
