"""``clip``: scale the update down so that its L2 norm is at most ``max_norm`` (globally or per tensor)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clients.defenses.base import (
    DefenseConfig,
    DefenseContext,
    DefenseEntry,
    DefenseOutcome,
    Update,
    global_norm,
    norm_record,
)
from clients.defenses.registry import DEFENSES


class ClipDefense(DefenseConfig):
    name: Literal["clip"] = Field("clip", description="clip the update's L2 norm")
    max_norm: float = Field(..., gt=0, description="largest L2 norm sent")
    scope: Literal["global", "per-tensor"] = Field("global", description="one norm over all tensors, or one each")


def _scale(norm: float, max_norm: float) -> float:
    return 1.0 if norm <= max_norm else max_norm / norm


def clip_update(update: Update, config: ClipDefense, context: DefenseContext) -> DefenseOutcome:
    if config.scope == "global":
        factor = _scale(global_norm(update), config.max_norm)
        factors = dict.fromkeys(update, factor)
    else:
        factors = {name: _scale(global_norm({name: delta}), config.max_norm) for name, delta in update.items()}
    clipped = {name: delta * factors[name] if factors[name] < 1.0 else delta for name, delta in update.items()}
    record = norm_record(update, clipped) | {
        "tensors_clipped": float(sum(factor < 1.0 for factor in factors.values())),
    }
    return DefenseOutcome(clipped, record)


DEFENSES.register(
    "clip",
    help="clip the update's L2 norm to max_norm (global or per tensor)",
    config=ClipDefense,
)(DefenseEntry(kind="update", apply=clip_update))
