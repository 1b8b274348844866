"""The contract between a client and its defenses.

Two kinds, both registered in ``DEFENSES`` under the name used in ``client.defenses``:

* training-level defenses (``dpsgd``, ``pdpsgd``) change how the client trains; ``clients.client_app``
  hands them the local training itself;
* update-level defenses transform what the client sends: a pure function
  ``(update, config, context) -> DefenseOutcome`` of the update (local weights minus global weights,
  trainable parameters only) and the context below. They run after training, in the order listed, and
  what the last one returns is what goes on the wire (and what the adversary's ``mitm`` tap sees).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

#: parameter name -> (local - global) of that trainable parameter
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
class DefenseEntry:
    """A registered defense: ``apply`` for update-level ones, ``None`` for training-level ones."""

    kind: str  # "training" or "update"
    apply: UpdateDefense | None = None


def global_norm(update: Update) -> float:
    """L2 norm of all tensors of ``update`` together."""
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in update.values())))
