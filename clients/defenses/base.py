"""The contract between a client and its defenses.

Two kinds, both registered in ``DEFENSES`` under the name used in ``client.defenses``:

* training-level defenses (``dpsgd``, ``pdpsgd``) change how the client trains: ``DefenseEntry.train``
  turns the round's ``TrainingPlan`` into a ``TrainingSession`` that ``clients.training.train_locally``
  trains through (its model, optimizer, batches and an extra loss term);
* update-level defenses transform what the client sends: a pure function
  ``(update, config, context) -> DefenseOutcome`` of the update and the context below. They run after
  training, in the order listed, and what the last one returns is what goes on the wire (and what the
  adversary's ``mitm`` tap sees).

The update they see is the client's *pseudo-gradient* ``(w_global - w_local) / lr``, trainable parameters
only: after one local SGD step it is exactly the gradient an attacker inverts, so a defense's scale
(``noise.sigma``, ``clip.max_norm``, ``gradient_dropout.sigma``) means what it means in the papers, which
perturb gradients; after several steps it is the sum of the local gradients. The client sends
``w_global - lr * defended``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, cast

import numpy as np
import torch
from torch import nn

from fedsim.core.sections import Section


class DefenseConfig(Section):
    """Base of every defense's config model: ``name`` (a ``Literal`` of the registered name) tags it in
    ``client.defenses``; the defense's own keys follow."""

    name: str

    @property
    def builds_dp_compatible_model(self) -> bool:
        """Whether every party must build the model with Opacus' layer replacements (dpsgd's fix_model)."""
        return False


#: parameter name -> (global - local) / lr of that trainable parameter: the pseudo-gradient
Update = dict[str, torch.Tensor]


@dataclass(frozen=True)
class DefenseContext:
    """What a client knows locally when it shapes its update; never leaves the client."""

    model: nn.Module  # the architecture at this round's GLOBAL weights, in train mode; must not be modified
    x: torch.Tensor  # the samples the client trained on this round (as fed to the model)
    y: torch.Tensor  # their labels
    lr: float  # the local learning rate
    generator: torch.Generator  # seeded per (run seed, round, client, position in the list): fresh every round


@dataclass(frozen=True)
class DefenseOutcome:
    update: Update
    # What the defense did, for the `fit` rows: plain floats under short keys such as
    # "norm_before", "norm_after", "fraction_changed" (the client prefixes them with the defense's name).
    record: dict[str, float] = field(default_factory=dict)


UpdateDefense = Callable[[Update, Any, DefenseContext], DefenseOutcome]


@dataclass(frozen=True)
class TrainingContext:
    """Where this round's local training sits in the federation: what training-level defenses need besides data."""

    server_round: int
    planned_rounds: int  # federation.rounds: a budget given as dpsgd.target_epsilon is spread over all of them
    state_dir: Path | None = None  # per-client folder that outlives the round and the Ray actor; None: nothing persists


class GradientInsertion(Protocol):
    """Gradients a privacy auditor inserts into one client's round (``adversary.privacy_audit``'s canaries)."""

    def step_gradients(self, parameters: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """The summed gradients of the canary examples that joined this step, shaped as the trainable
        ``parameters`` (each example's at most the clipping bound), or None when none joined."""


@dataclass(frozen=True)
class TrainingPlan:
    """One round of local training as ``clients.training.train_locally`` set it up, before a defense changes it."""

    model: nn.Module  # trained in place
    optimizer: torch.optim.Optimizer  # over model.parameters()
    num_samples: int
    batch_size: int  # the configured batch size, at most num_samples
    steps: int  # optimizer steps this round
    lr: float
    rng: np.random.Generator  # draws the batches: a defense that samples its own draws them from it
    seed: int  # the round's training seed, from which a defense derives its own randomness (DP noise)
    context: TrainingContext
    # an audit's canary gradients: DP-SGD adds them to the clipped sum before its noise, other sessions to the
    # batch's mean gradient (``train_locally``), each as one more example of the batch; None: no audit
    canaries: GradientInsertion | None = None


class TrainingSession:
    """A training-level defense in force for one round; this base class changes nothing.

    ``train_locally`` forwards through ``model``, adds ``penalty()`` (if not None) to every batch loss, steps
    ``optimizer``, takes its batches from ``schedule`` (None: its usual shuffled ones) and calls ``finish()``
    once after the last step. A session that sets ``inserts_canaries`` puts the plan's canary gradients in
    itself (where its mechanism needs them); for the others ``train_locally`` adds them to the batch gradient.
    A session is a context manager: leaving it, on failure too, restores the
    plan's model to a plain module (no hooks, no extra attributes) holding the trained weights.
    """

    inserts_canaries = False
    #: clips each sample's gradient: its loss must depend on that sample alone (``train_locally`` then averages a
    #: sequence's token losses within the sequence, not over the batch's tokens, whose count the others set)
    clips_per_sample = False

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, schedule: list[np.ndarray] | None = None
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule

    def penalty(self) -> torch.Tensor | None:
        """A term added to the loss of the batch just forwarded."""
        return None

    def finish(self) -> dict[str, float]:
        """Account for the finished round; what the defense did, as plain floats under short keys."""
        return {}

    def close(self) -> None:
        """Undo what the session did to the model."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


#: (the defense's config, the round's plan) -> the session that trains under it
TrainingDefense = Callable[[Any, TrainingPlan], TrainingSession]
#: (model, the defense's config) -> None, or a ModelError when the defense cannot train that model
ModelCheck = Callable[[nn.Module, Any], None]


@dataclass(frozen=True)
class DefenseEntry:
    """A registered defense: ``apply`` for update-level ones; ``train`` (and ``check_model``) for
    training-level ones."""

    kind: str  # "training" or "update"
    apply: UpdateDefense | None = None
    train: TrainingDefense | None = None
    check_model: ModelCheck | None = None  # run on the federation's model before the run starts


def global_norm(update: Update) -> float:
    """L2 norm of all tensors of ``update`` together."""
    return float(torch.sqrt(cast(torch.Tensor, sum((t.double() ** 2).sum() for t in update.values()))))


def flatten(update: Update) -> torch.Tensor:
    """All entries of ``update`` as one vector, in the dict's order (see ``unflatten``)."""
    return torch.cat([t.reshape(-1) for t in update.values()])


def unflatten(vector: torch.Tensor, like: Update) -> Update:
    """The inverse of ``flatten``: ``vector`` cut into tensors shaped as the entries of ``like``."""
    pieces = torch.split(vector, [t.numel() for t in like.values()])
    return {name: piece.view_as(t) for (name, t), piece in zip(like.items(), pieces, strict=True)}


def fraction_changed(before: Update, after: Update) -> float:
    """Share of entries whose value the defense changed."""
    changed = sum(int((before[name] != value).sum()) for name, value in after.items())
    return changed / max(1, sum(t.numel() for t in before.values()))


def norm_record(before: Update, after: Update) -> dict[str, float]:
    """What every update-level defense reports: L2 norms before and after, and the share of entries changed."""
    return {
        "norm_before": global_norm(before),
        "norm_after": global_norm(after),
        "fraction_changed": fraction_changed(before, after),
    }
