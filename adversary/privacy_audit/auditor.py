"""A run's audit: the canaries it inserts, the scores it keeps round by round, and the bound it reports.

The host client asks ``ExampleCanaries`` for its round's Dirac canaries; the server side feeds ``RunAuditor``
what its tap sees (``observe``, a tap sink) and, at the end, the final model. Per-round scores are kept by
round, so a resumed run drops those of the round it replays. The canaries' inclusion is drawn from the run's
seed; the auditor compares it with its guesses only to count the right ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from adversary.privacy_audit.bound import EPSILON_DELTA, GAUSSIAN_FDP, AuditResult, audit_guesses
from adversary.privacy_audit.canaries import CanaryClients, CanaryExamples, DiracCanaries, ExampleCanaries
from adversary.privacy_audit.config import CLIENT, EXAMPLE, AuditConfig
from adversary.privacy_audit.one_shot import OneShotEstimate, one_shot_estimate
from adversary.privacy_audit.scores import flat_change, loss_scores
from adversary.taps import AGGREGATE, TappedUpdate


def trainable_names(model: torch.nn.Module) -> list[str]:
    """The parameters a canary's coordinates and directions index, in order."""
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


class RunAuditor:
    """Scores the canaries from what the configured threat model sees, and turns them into the bound."""

    def __init__(
        self,
        config: AuditConfig,
        level: str,
        model: torch.nn.Module,
        *,
        seed: int,
        norm: float,
        delta: float,
        lr: float,
        examples: CanaryExamples | None = None,
    ) -> None:
        """``examples``: the canary examples as the host holds them (black-box only)."""
        self.config, self.level, self.delta, self.lr, self.norm = config, level, delta, lr, norm
        self.canary_weight: float | None = None  # under SecAgg+: each canary client's weight (examples)
        self.model, self.examples = model, examples
        self.names = trainable_names(model)
        dimension = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.example = ExampleCanaries(config.canaries, norm, config.host, seed)
        self.dirac: DiracCanaries | None = None
        self.clients: CanaryClients | None = None
        if examples is not None:
            pass  # black-box: no gradient canary, no canary client
        elif level == EXAMPLE:
            self.dirac = self.example.plan(model)
        else:
            self.clients = CanaryClients.draw(config.canaries, dimension, norm, seed)
        self.per_round: dict[int, list[float]] = {}

    @property
    def included(self) -> np.ndarray:
        if self.examples is not None:
            return self.examples.included
        return self.dirac.included if self.dirac is not None else self.clients.included  # type: ignore[union-attr]

    def inserted_updates(self, like: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """(client level) what the included canary clients add to the sum of clipped updates, by parameter."""
        assert self.clients is not None
        flat, out, offset = self.clients.inserted_sum(), {}, 0
        for name in self.names:
            size = like[name].numel()
            out[name] = flat[offset : offset + size].reshape(like[name].shape).numpy()
            offset += size
        return out

    def observe(self, update: TappedUpdate) -> None:
        """A tap's sink: the host's updates (example level) or the aggregates (client level), every round."""
        if self.config.threat_model != "white-box":
            return
        if self.level == EXAMPLE and update.source == f"client:{self.config.host}":
            assert self.dirac is not None
            change = flat_change(update.global_state, update.observed_state, self.names) / self.lr
            self.per_round[update.round] = self.dirac.read(change).tolist()
        elif self.level == CLIENT and update.source == AGGREGATE:
            assert self.clients is not None
            change = flat_change(update.observed_state, update.global_state, self.names)
            self.per_round[update.round] = self.clients.cosines(change).tolist()

    def restore(self, saved: Mapping[str, Sequence[float]] | None, committed: int) -> None:
        """A resumed run's scores of its committed rounds (``saved``: what ``state`` returned)."""
        for key, scores in (saved or {}).items():
            if int(key) <= committed:
                self.per_round[int(key)] = list(scores)

    def state(self) -> dict[str, list[float]]:
        return {str(key): scores for key, scores in sorted(self.per_round.items())}

    def scores(self, initial: Mapping[str, torch.Tensor], final: Mapping[str, torch.Tensor]) -> np.ndarray:
        """Every canary's score under the threat model (the final model against the initial one for final-model)."""
        if self.examples is not None:  # black-box: the final model's loss on each canary example
            self.model.load_state_dict(final)
            return loss_scores(self.model, self.examples.x, self.examples.y)
        if self.config.threat_model == "white-box":
            if not self.per_round:
                return np.zeros(len(self.included))
            return np.sum([np.asarray(scores) for scores in self.per_round.values()], axis=0)
        if self.dirac is not None:
            return self.dirac.read(flat_change(initial, final, self.names))
        assert self.clients is not None
        return self.clients.cosines(flat_change(final, initial, self.names))

    def result(self, initial: Mapping[str, torch.Tensor], final: Mapping[str, torch.Tensor]) -> AuditResult:
        return self.outcome(initial, final)[0]

    def outcome(
        self, initial: Mapping[str, torch.Tensor], final: Mapping[str, torch.Tensor]
    ) -> tuple[AuditResult, OneShotEstimate | None]:
        """The bounds, and at client level Andrew et al.'s one-shot estimate from the same cosines (scored once)."""
        scores = self.scores(initial, final)
        result = audit_guesses(scores, self.included, delta=self.delta, confidence=self.config.confidence)
        estimate = one_shot_estimate(scores, self.included, self.delta) if self.level == CLIENT else None
        return result, estimate


def accountant_key(level: str) -> str:
    """The summary's name of the accountant's epsilon beside the bound."""
    return "epsilon_example" if level == EXAMPLE else "epsilon_client"


def audit_fields(
    result: AuditResult,
    level: str,
    threat_model: str,
    claimed: float | None,
    estimate: OneShotEstimate | None = None,
    *,
    canary_norm: float | None = None,
    canary_weight: float | None = None,
    gaussian: bool = True,
) -> dict[str, Any]:
    """The audit's row and summary fields: both bounds (epsilon-delta and f-DP) and the stronger one as the
    result, with confidence, delta, adjacency and the canaries' norm (bounds with different norms measure
    different canaries), beside the accountant's epsilon (None where none is claimed); at client level also
    Andrew et al.'s one-shot estimate (an estimate: no confidence, never a bound); under SecAgg+ the canary
    clients' weight (examples). ``gaussian``: whether the mechanism claims Gaussian noise; where it does not
    (defenses without DP, SecAgg+), the result is the epsilon-delta bound, which assumes nothing about it."""
    one_shot = (
        {}
        if estimate is None
        else {
            "audit_one_shot_epsilon_estimate": estimate.epsilon,
            "audit_one_shot_mu_estimate": estimate.mu,
        }
    )
    return {
        **one_shot,
        "audit_epsilon_result": result.epsilon_result if gaussian else result.epsilon_lower,
        "audit_result_analysis": result.analysis if gaussian else EPSILON_DELTA,
        "audit_epsilon_lower": result.epsilon_lower,  # the epsilon-delta bound
        "audit_fdp_epsilon_lower": result.fdp_epsilon_lower,
        "audit_gdp_mu_lower": result.gdp_mu_lower,
        "audit_fdp_guesses": result.fdp_guesses,
        "audit_fdp_correct": result.fdp_correct,
        "audit_confidence": result.confidence,
        "audit_delta": result.delta,
        "audit_adjacency": level,
        "audit_threat_model": threat_model,
        "audit_canaries": result.canaries,
        **({} if canary_norm is None else {"audit_canary_norm": canary_norm}),
        **({} if canary_weight is None else {"audit_canary_weight": canary_weight}),
        "audit_included": result.included,
        "audit_guesses": result.guesses,
        "audit_correct": result.correct,
        # the released model is the audited one: it was trained with the included canaries
        "audit_model": "trained with the canaries",
        accountant_key(level): claimed,
    }


def audit_result_text(fields: Mapping[str, Any]) -> str:
    """The result with both analyses, e.g. "epsilon >= 1.30 at 95% confidence (delta 1e-05; f-DP (Gaussian):
    not mu-GDP below mu = 0.35; epsilon-delta: 1.01)". Rows written before the f-DP analysis have only the latter."""
    head = f"at {fields['audit_confidence']:.0%} confidence (delta {fields['audit_delta']:g}"
    if "audit_fdp_epsilon_lower" not in fields:
        return f"epsilon >= {fields['audit_epsilon_lower']:.2f} {head})"
    return (
        f"epsilon >= {fields['audit_epsilon_result']:.2f} {head}, by the {fields['audit_result_analysis']} analysis; "
        f"{GAUSSIAN_FDP}: {fields['audit_fdp_epsilon_lower']:.2f}, not mu-GDP below mu = "
        f"{fields['audit_gdp_mu_lower']:.2f}; {EPSILON_DELTA}: {fields['audit_epsilon_lower']:.2f})"
    )


def canary_text(fields: Mapping[str, Any]) -> str:
    """The canaries as one phrase, e.g. "1000 canaries of norm 1 (canary clients of 500 examples' weight, carried
    in the SecAgg+ masked vectors)"; rows written before the norm was recorded give the count alone."""
    text = f"{fields['audit_canaries']} canaries"
    if "audit_canary_norm" in fields:
        text += f" of norm {fields['audit_canary_norm']:g}"
    if "audit_canary_weight" in fields:
        text += (
            f" (canary clients of {fields['audit_canary_weight']:g} examples' weight, carried in the SecAgg+ "
            "masked vectors)"
        )
    return text


def one_shot_text(fields: Mapping[str, Any]) -> str | None:
    """Andrew et al.'s estimate as one phrase (None where the run has none: example level, or older rows)."""
    if "audit_one_shot_epsilon_estimate" not in fields:
        return None
    return (
        f"one-shot estimate (Andrew et al. 2024; an estimate, not a bound): epsilon ~ "
        f"{fields['audit_one_shot_epsilon_estimate']:.2f} (mu ~ {fields['audit_one_shot_mu_estimate']:.2f})"
    )


def audit_warning(fields: Mapping[str, Any]) -> str | None:
    """One line when a measured lower bound exceeds the accountant's epsilon, else None. The epsilon-delta bound
    assumes nothing about the mechanism; the f-DP one assumes a Gaussian trade-off curve, which the line says."""
    claimed = fields.get(accountant_key(fields["audit_adjacency"]))
    if claimed is None or not math.isfinite(claimed):
        return None
    level = f"{fields['audit_confidence']:.0%} confidence, {fields['audit_adjacency']} level"
    bound = fields["audit_epsilon_lower"]
    if bound > claimed:
        return (
            f"the measured lower bound on epsilon ({bound:.2f} at {level}) exceeds the accountant's epsilon "
            f"({claimed:.2f}): DP is misconfigured or broken"
        )
    gaussian = fields.get("audit_fdp_epsilon_lower", 0.0)
    if gaussian > claimed:
        return (
            f"the f-DP (Gaussian) lower bound on epsilon ({gaussian:.2f} at {level}) exceeds the accountant's epsilon "
            f"({claimed:.2f}): DP is misconfigured or broken, or the mechanism's trade-off curve is not Gaussian"
        )
    return None
