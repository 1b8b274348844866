"""``clip``: scale the update down so that its L2 norm is at most ``max_norm`` (globally or per tensor)."""

from __future__ import annotations

from clients.defenses.base import DefenseContext, DefenseEntry, DefenseOutcome, Update, global_norm, norm_record
from clients.defenses.registry import DEFENSES
from fedsim.config import ClipDefense


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


DEFENSES.register("clip", help="clip the update's L2 norm to max_norm (global or per tensor)")(
    DefenseEntry(kind="update", apply=clip_update)
)
