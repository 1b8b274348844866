"""``adversary.privacy_audit`` on an audited Flower app: a lower bound on each node's example-level epsilon, measured
from the updates it sent, beside the epsilon the app claims for that node.

Canaries (Steinke, Nasr, Jagielski 2023, one run): every node gets its own ``canaries`` mislabelled held-out images
(the app's own held-out loaders, ``app.data.test_output``; a wrong label drawn for each), each included with
probability 1/2, drawn from the run's seed and the node's partition id. The included ones enter the node's training
through the app's data function (``fedsim.engine.app_audit.data_canaries``): the app, unedited, trains on them as on
its own examples, DP-SGD's sampling, clipping and noise included. The auditor scores each canary from the node's
updates as sent (the man in the middle's view, every round): how much each update lowered the canary's loss
(``adversary.privacy_audit.scores.update_loss_scores``), summed over the rounds; it never sees which were included.

The bound (``adversary.privacy_audit.bound``) is for **add/remove one training example of that node**, over every
round it trained, at the delta the app asked its accountant for (1e-5 where it asked none). It stands beside the app's
own claim: the epsilon Opacus' accountant returned when the app last asked (``PrivacyEngine.get_epsilon``), with
how many of the node's DP-SGD steps that accountant saw; a bound above the claim is one loud line.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from adversary.privacy_audit.auditor import audit_fields, audit_result_text, audit_warning
from adversary.privacy_audit.bound import audit_guesses
from adversary.privacy_audit.canaries import CanaryExamples
from adversary.privacy_audit.config import EXAMPLE, AuditConfig
from adversary.privacy_audit.scores import update_loss_scores
from adversary.taps import TappedUpdate
from fedsim.core.errors import ConfigError
from fedsim.core.seeding import derive_seed
from fedsim.data import ChannelStats
from fedsim.data.sources.flower_app import AppDataConfig
from fedsim.engine.app_audit.client_probe import CANARIES_ENTERED, OPACUS, OPACUS_SPENT
from fedsim.engine.app_audit.data_canaries import DataCanaries
from fedsim.engine.lifecycle.federation import Federation

logger = logging.getLogger("fedsim")

AUDIT_EVENT = "app_privacy_audit"  # one row per node: its bound beside the app's claim
DEFAULT_DELTA = 1e-5  # where the app asked its accountant for none
THREAT_MODEL = "white-box"
CLIENT_SOURCE = "client:"


def app_privacy_audit(
    audit: AuditConfig | None, data: AppDataConfig, seed: int, federation: Federation, model: nn.Module
) -> AppPrivacyAudit | None:
    """The audit of ``adversary.privacy_audit`` (None where it is off), its canaries drawn for every node from the
    run's ``seed``."""
    if audit is None:
        return None
    canaries = node_canaries(audit, federation, federation.test_stats, derive_seed(seed, "audit"))
    return AppPrivacyAudit(audit, model, canaries, data_canaries(data, canaries))


def node_canaries(
    audit: AuditConfig, federation: Federation, stats: ChannelStats, seed: int
) -> dict[int, CanaryExamples]:
    """Each node's canary examples: held-out images in the app's input space, relabelled, half included."""
    dataset = federation.dataset
    images = stats.normalize(torch.from_numpy(dataset.x_test))
    labels = torch.from_numpy(dataset.y_test)
    if audit.canaries > len(images):
        raise ConfigError(
            f"adversary.privacy_audit.canaries = {audit.canaries}: the app's held-out loaders (app.data.test_output) "
            f"hold {len(images)} images, and each canary is one of them; give at most {len(images)}"
        )
    return {
        partition: CanaryExamples.draw(
            images, labels, audit.canaries, dataset.num_classes, derive_seed(seed, "app-canaries", partition)
        )
        for partition in range(len(federation.partitions))
    }


def data_canaries(data: AppDataConfig, canaries: Mapping[int, CanaryExamples]) -> DataCanaries:
    """What each node's probe adds to the app's training loader: its included canaries."""
    return DataCanaries(
        data.function,
        data.train_output,
        data.image_key,
        data.label_key,
        {partition: plan.inserted() for partition, plan in canaries.items()},
    )


@dataclass(frozen=True)
class Claim:
    """What the app asked Opacus' accountant for a node, the last time it asked."""

    epsilon: float
    delta: float
    accountant_steps: int


def claims_of(dp_rows: Iterable[Mapping[str, Any]]) -> dict[int, Claim]:
    """Per node, the last epsilon its Opacus accountant returned (``app_dp`` rows of ``OPACUS_SPENT``)."""
    claims: dict[int, Claim] = {}
    for row in dp_rows:
        if row.get("mechanism") == OPACUS_SPENT:
            claims[int(row["client"])] = Claim(row["epsilon"], row["delta"], int(row.get("accountant_steps", 0)))
    return claims


def canaries_entered(dp_rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """Per node, the train calls whose data function added its canaries (``CANARIES_ENTERED`` notes)."""
    entered: dict[int, int] = {}
    for row in dp_rows:
        if row.get("mechanism") == CANARIES_ENTERED and row.get("data_function_calls", 0) > 0:
            entered[int(row["client"])] = entered.get(int(row["client"]), 0) + 1
    return entered


class AppPrivacyAudit:
    """Scores every node's canaries from its updates as sent (``observe``, the grid's audit sink), then bounds."""

    def __init__(
        self, config: AuditConfig, model: nn.Module, canaries: Mapping[int, CanaryExamples], data: DataCanaries
    ) -> None:
        """``data``: what the nodes' probes add to the app's training loaders."""
        self.config, self.data = config, data
        self.model = copy.deepcopy(model).cpu()
        self.canaries = dict(canaries)
        self.scores = {partition: np.zeros(len(plan.included)) for partition, plan in self.canaries.items()}
        self.updates = dict.fromkeys(self.canaries, 0)
        self._lock = threading.Lock()

    def observe(self, update: TappedUpdate) -> None:
        if not update.source.startswith(CLIENT_SOURCE):
            return
        partition = int(update.source[len(CLIENT_SOURCE) :])
        plan = self.canaries.get(partition)
        if plan is None:
            return
        with self._lock:  # one model serves every node's scores
            learned = update_loss_scores(self.model, update.global_state, update.observed_state, plan.x, plan.y)
            self.scores[partition] += learned
            self.updates[partition] += 1

    def node_fields(self, partition: int, claim: Claim | None, gaussian: bool, steps: int) -> dict[str, Any] | None:
        """One node's audit row fields (None where none of its updates was seen in clear)."""
        if not self.updates[partition]:
            return None
        delta = claim.delta if claim is not None else DEFAULT_DELTA
        result = audit_guesses(
            self.scores[partition], self.canaries[partition].included, delta=delta, confidence=self.config.confidence
        )
        fields = audit_fields(
            result, EXAMPLE, THREAT_MODEL, claim.epsilon if claim is not None else None, gaussian=gaussian
        )
        return {
            "client": partition,
            **fields,
            "audit_model": "the node's updates as sent, trained with the canaries",
            "audit_canary_kind": "mislabelled held-out images through the app's data function",
            "audit_updates": self.updates[partition],
            "audit_node_steps": steps,
            **({"claim_accountant_steps": claim.accountant_steps} if claim is not None else {}),
        }


def node_line(fields: Mapping[str, Any]) -> str:
    """One node's bound beside the app's claim, in one line."""
    claimed = fields.get("epsilon_example")
    if claimed is None:
        beside = "the app claims no epsilon for it"
    else:
        covered = fields.get("claim_accountant_steps")
        steps = fields.get("audit_node_steps")
        cover = f", over {covered} of the {steps} DP-SGD steps it took" if covered is not None and steps else ""
        beside = f"the app's own epsilon {claimed:.3g} (Opacus' accountant, delta {fields['audit_delta']:g}{cover})"
    return (
        f"privacy audit, node {fields['client']} (example level: add/remove one of its training examples; "
        f"{fields['audit_canaries']} canary examples, its {fields['audit_updates']} update(s) as sent): "
        f"{audit_result_text(fields)}; beside {beside}"
    )


def contradiction_line(fields: Mapping[str, Any]) -> str | None:
    """The loud line where the node's bound exceeds the app's claim (None otherwise)."""
    warning = audit_warning(fields)
    return (
        None if warning is None else f"the app's epsilon claim for node {fields['client']} is contradicted: {warning}"
    )


def finish_audit(
    audit: AppPrivacyAudit, dp_rows: list[dict[str, Any]], steps_of: Mapping[int, int]
) -> list[dict[str, Any]]:
    """Every node's audit fields (its row), each said in one line, a contradicted claim in one loud line."""
    claims = claims_of(dp_rows)
    private = {int(row["client"]) for row in dp_rows if row.get("mechanism") == OPACUS}
    entered = canaries_entered(dp_rows)
    rows = []
    for partition in sorted(audit.canaries):
        if not entered.get(partition):
            logger.warning(
                "privacy audit, node %d: no canary entered its training (its train calls never called %s, which the "
                "audit config names as app.data.function): no bound",
                partition,
                audit.data.function,
            )
            continue
        fields = audit.node_fields(partition, claims.get(partition), partition in private, steps_of.get(partition, 0))
        if fields is None:
            logger.warning(
                "privacy audit, node %d: none of its updates was seen in clear (masked, or it never trained): no bound",
                partition,
            )
            continue
        rows.append(fields)
        logger.info(node_line(fields))
        line = contradiction_line(fields)
        if line is not None:
            logger.warning(line)
    return rows
