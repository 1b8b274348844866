"""Local training of one client for one round: a function of tensors, no Flower.

A training-level defense of ``cfg.defenses`` (``dpsgd``, ``pdpsgd``) trains through a ``TrainingSession``
(its model, optimizer, batches and loss term); without one the session is the plain model and optimizer.
The only file a round may touch is the defense's own per-client state (``TrainingContext.state_dir``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from clients.defenses import DEFENSES
from clients.defenses.base import DefenseConfig, GradientInsertion, TrainingContext, TrainingPlan, TrainingSession
from clients.defenses.pipeline import record_keys


class TrainingSettings(Protocol):
    """What local training reads of the ``client`` section."""

    @property
    def optimizer(self) -> str:  # a key of OPTIMIZERS
        ...

    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    local_steps: int | None  # exclusive with local_epochs
    local_epochs: int | None

    @property
    def defenses(self) -> Sequence[DefenseConfig]: ...


OPTIMIZERS = {
    "sgd": lambda params, cfg: torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay),
    "adam": lambda params, cfg: torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay),
}


class NonFiniteLossError(RuntimeError):
    """The local loss became NaN or infinite; the client's update must not be aggregated."""


class NonFiniteUpdateError(RuntimeError):
    """What the client would send holds NaN or infinite values (diverging training, a defense's noise of
    infinite scale, a broken defense): it fails the round instead of poisoning the aggregate."""


@dataclass(frozen=True)
class LocalTrainingResult:
    train_loss: float  # mean loss over the local steps
    steps: int
    batches: list[list[int]]  # sample ids of every step, in the order used (ground truth, never sent)
    labels: list[list[int]]  # their labels, in the same order
    # What the training-level defense did, as reply metrics: "defense.<name>.<key>" -> plain float
    defense_records: dict[str, float] = field(default_factory=dict)


def planned_steps(num_samples: int, batch_size: int, cfg: TrainingSettings) -> int:
    """Optimizer steps of one round: ``local_steps``, or ``local_epochs`` passes of ceil(N / batch) batches."""
    per_epoch = math.ceil(num_samples / min(batch_size, num_samples))
    if cfg.local_steps is not None:
        return cfg.local_steps
    assert cfg.local_epochs is not None  # the config sets local_epochs to 1 when local_steps is unset
    return per_epoch * cfg.local_epochs


def batch_schedule(
    num_samples: int, batch_size: int, cfg: TrainingSettings, rng: np.random.Generator
) -> list[np.ndarray]:
    """Positions (into the client's data) of every local step's mini-batch.

    Each epoch is a fresh permutation; `local_steps` walks through consecutive epochs, so a client
    with fewer samples than one batch still trains on all of them.
    """
    steps = planned_steps(num_samples, batch_size, cfg)
    batch_size = min(batch_size, num_samples)
    schedule: list[np.ndarray] = []
    while len(schedule) < steps:
        order = rng.permutation(num_samples)
        schedule.extend(order[i : i + batch_size] for i in range(0, num_samples, batch_size))
    return schedule[:steps]


def train_locally(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sample_ids: np.ndarray,
    cfg: TrainingSettings,
    seed: int,
    context: TrainingContext | None = None,
    canaries: GradientInsertion | None = None,
) -> LocalTrainingResult:
    """Train ``model`` in place on (x, y) as configured; ``sample_ids`` are the global ids of the rows.

    ``context`` places the round in the federation for a training-level defense (default: a lone round
    whose state is not kept); ``canaries``: a privacy audit's gradients, inserted at every step.
    """
    torch.manual_seed(seed)  # dropout masks and any other in-model randomness
    rng = np.random.default_rng(seed)
    device = next(model.parameters()).device
    optimizer = OPTIMIZERS[cfg.optimizer](model.parameters(), cfg)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    plan = TrainingPlan(
        model=model,
        optimizer=optimizer,
        num_samples=len(x),
        batch_size=min(cfg.batch_size, len(x)),
        steps=planned_steps(len(x), cfg.batch_size, cfg),
        lr=cfg.lr,
        rng=rng,
        seed=seed,
        context=context or TrainingContext(server_round=1, planned_rounds=1),
        canaries=canaries,
    )
    session, prefix = open_session(plan, cfg)
    losses = []
    with session:
        schedule = session.schedule
        if schedule is None:
            schedule = batch_schedule(len(x), cfg.batch_size, cfg, rng)
        for step, positions in enumerate(schedule, start=1):
            index = torch.from_numpy(positions)
            inputs, targets = x[index].to(device), y[index].to(device)
            session.optimizer.zero_grad(set_to_none=True)
            outputs = session.model(inputs)
            # An empty (Poisson) batch has no loss; its step, and the noise DP-SGD adds to it, still happen.
            empty = len(positions) == 0
            if empty:
                loss = outputs.sum()
            elif session.clips_per_sample and targets.dim() > 1:
                loss = per_sequence_loss(outputs, targets)
            else:
                loss = loss_fn(outputs, targets)
            penalty = session.penalty()
            objective = loss if penalty is None else loss + penalty
            if not torch.isfinite(objective):
                raise NonFiniteLossError(f"local loss is {objective.item()} at step {step}")
            objective.backward()
            if canaries is not None and not session.inserts_canaries:
                add_to_batch_gradient(model, canaries, plan.batch_size)
            session.optimizer.step()
            if not empty:
                losses.append(loss.item())
        record = session.finish()
    return LocalTrainingResult(
        train_loss=float(np.mean(losses)) if losses else math.nan,
        steps=len(schedule),
        batches=[sample_ids[p].tolist() for p in schedule],
        labels=[y[torch.from_numpy(p)].tolist() for p in schedule],
        defense_records={f"{prefix}.{key}": float(value) for key, value in record.items()},
    )


def per_sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean over sequences of each sequence's mean token loss (padding, target -100, left out).

    ``nn.CrossEntropyLoss`` averages over the batch's real tokens, so one sequence's gradient would be scaled by
    how many tokens the others hold; under per-sample clipping (DP-SGD) a sample's gradient may depend on itself
    alone, or removing one sample changes the others' contributions beyond the clipping bound.
    """
    losses = nn.functional.cross_entropy(logits, targets, reduction="none")  # (B, L); 0 where ignored
    counts = (targets != -100).sum(dim=1).clamp(min=1)
    return (losses.sum(dim=1) / counts).mean()


def add_to_batch_gradient(model: nn.Module, canaries: GradientInsertion, batch_size: int) -> None:
    """Add the canaries that joined this step to the mean gradient of the batch, as examples of it would be."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    inserted = canaries.step_gradients(trainable)
    if inserted is None:
        return
    for parameter, gradient in zip(trainable, inserted, strict=True):
        step = gradient / batch_size
        parameter.grad = step if parameter.grad is None else parameter.grad + step


def open_session(plan: TrainingPlan, cfg: TrainingSettings) -> tuple[TrainingSession, str]:
    """The session of the training-level defense in ``cfg.defenses`` (at most one), with its record prefix;
    a plain session (model and optimizer as they are) when there is none."""
    for defense, prefix in zip(cfg.defenses, record_keys(cfg.defenses), strict=True):
        train = DEFENSES.get(defense.name).train
        if train is not None:
            return train(defense, plan), prefix
    return TrainingSession(plan.model, plan.optimizer), ""


def check_training_defenses(model: nn.Module, defenses: list[Any]) -> None:
    """Raise the one-line ModelError of a training-level defense that cannot train ``model`` (before a run)."""
    for defense in defenses:
        check = DEFENSES.get(defense.name).check_model
        if check is not None:
            check(model, defense)
