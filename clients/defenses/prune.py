"""``prune``: zero exactly ``round(ratio * n)`` smallest-magnitude entries (over all tensors, or per tensor).

Ties at the threshold are broken by position (``torch.topk``), so the count is exact even when many
entries share a magnitude, e.g. an update that is already sparse.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from clients.defenses.base import (
    DefenseConfig,
    DefenseContext,
    DefenseEntry,
    DefenseOutcome,
    Update,
    flatten,
    norm_record,
    unflatten,
)
from clients.defenses.registry import DEFENSES


class PruneDefense(DefenseConfig):
    name: Literal["prune"] = Field("prune", description="zero the smallest-magnitude update entries")
    ratio: float = Field(..., gt=0, lt=1, description="fraction of entries set to zero")
    scope: Literal["global", "per-tensor"] = Field("global", description="rank entries over all tensors, or per tensor")


def zero_smallest(values: torch.Tensor, ratio: float) -> torch.Tensor:
    """A copy of ``values`` with its ``round(ratio * numel)`` smallest-magnitude entries set to zero."""
    flat = values.reshape(-1).clone()
    count = round(ratio * flat.numel())
    if count:
        flat[torch.topk(flat.abs(), count, largest=False, sorted=False).indices] = 0
    return flat.view_as(values)


def prune_update(update: Update, config: PruneDefense, context: DefenseContext) -> DefenseOutcome:
    if config.scope == "global":
        pruned = unflatten(zero_smallest(flatten(update), config.ratio), update)
    else:
        pruned = {name: zero_smallest(delta, config.ratio) for name, delta in update.items()}
    zeros = sum(int((delta == 0).sum()) for delta in pruned.values())
    record = norm_record(update, pruned) | {"fraction_zero": zeros / sum(t.numel() for t in update.values())}
    return DefenseOutcome(pruned, record)


DEFENSES.register(
    "prune",
    help="zero the fraction ratio of smallest-magnitude update entries",
    config=PruneDefense,
)(DefenseEntry(kind="update", apply=prune_update))
