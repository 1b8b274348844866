"""Run a client's update-level defenses in order, and turn what they did into reply metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from clients.defenses.base import DefenseContext, Update
from clients.defenses.registry import DEFENSES


def pseudo_gradient(global_params: dict[str, torch.Tensor], local_state: dict[str, torch.Tensor], lr: float) -> Update:
    """(global - local) / lr for every trainable parameter (buffers such as BN running statistics are no update)."""
    return {name: (value - local_state[name].detach()) / lr for name, value in global_params.items()}


def weights_to_send(global_params: dict[str, torch.Tensor], defended: Update, lr: float) -> dict[str, torch.Tensor]:
    """The trainable parameters a client sends for a defended pseudo-gradient: global - lr * defended."""
    return {name: value - lr * defended[name] for name, value in global_params.items()}


def update_level(defenses: Sequence[Any]) -> bool:
    """Whether any of ``defenses`` transforms the update (training-level ones act during training)."""
    return any(DEFENSES.get(defense.name).apply is not None for defense in defenses)


def record_keys(defenses: Sequence[Any]) -> list[str]:
    """The metric prefix of each listed defense: ``defense.<name>``, numbered when a name repeats."""
    counts = Counter(defense.name for defense in defenses)
    seen: Counter[str] = Counter()
    keys = []
    for defense in defenses:
        seen[defense.name] += 1
        suffix = f"#{seen[defense.name]}" if counts[defense.name] > 1 else ""
        keys.append(f"defense.{defense.name}{suffix}")
    return keys


def apply_update_defenses(
    defenses: Sequence[Any],
    update: Update,
    context_for: Any,
) -> tuple[Update, dict[str, float]]:
    """Apply every update-level defense of ``defenses`` (training-level ones are skipped: they acted already).

    ``context_for(position)`` builds the DefenseContext of the defense at that position of the list (each
    gets its own generator). Returns the update as sent and the records, keyed ``defense.<name>.<key>``.
    """
    records: dict[str, float] = {}
    for position, (defense, prefix) in enumerate(zip(defenses, record_keys(defenses), strict=True)):
        entry = DEFENSES.get(defense.name)
        if entry.apply is None:
            continue
        context: DefenseContext = context_for(position)
        outcome = entry.apply(update, defense, context)
        update = outcome.update
        records |= {f"{prefix}.{key}": float(value) for key, value in outcome.record.items()}
    return update, records
