"""How the attacker ranks its own results without the truth: in the race's cuts, the saturation step's choice of
leaders, and the pick a verdict is read from (``fedsim.judge.verdict``).

Results of attacks that model a defense in force (``AttackOptions.adapts_to``: an adaptive attack runs only where
its defense does) come first; within each group, the lowest ``gradient_match`` (1 - cosine between the update the
reconstruction would produce and the observed one, over every entry).

Why not the gradient match alone: a defense that replaces entries of the update (pruning zeroes the small ones,
Soteria the representation layer's, Gradient Dropout puts noise where it dropped) makes the whole-update match
reward a reconstruction that explains the replaced entries, which is what the attacks built for the defense leave
alone by design. The attacker knows the defense's public mechanism, so it trusts the result that models it.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any


def attacker_rank(adapts_to: Collection[str] | None, gradient_match: float) -> tuple[int, float]:
    """The sort key of a result among others on the same target, lower first: ``adapts_to`` non-empty (an attack
    built for a defense in force) before generic attacks, then the gradient match."""
    return (0 if adapts_to else 1, gradient_match)


def recorded_adapts_to(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The defenses the attack of a recorded result models: the row's ``adapts_to``, or, in rows recorded before
    runs wrote it, what the attack registered under the row's name declares (an attack no longer registered:
    none)."""
    recorded = row.get("adapts_to")
    if isinstance(recorded, (list, tuple)):
        return tuple(recorded)
    if callable(as_list := getattr(recorded, "tolist", None)):  # a column read back by pandas / numpy
        return tuple(as_list())
    return _registered_adapts_to(str(row.get("attack", "")))


@functools.cache
def _registered_adapts_to(name: str) -> tuple[str, ...]:
    import adversary.attacks  # noqa: F401  (registers the built-in attacks)
    from adversary.registry import ATTACKS

    try:
        return tuple(ATTACKS.options(name).adapts_to)
    except KeyError:
        return ()


def row_rank(row: Mapping[str, Any]) -> tuple[int, float]:
    """``attacker_rank`` of a recorded result (its row must carry a finite ``gradient_match``)."""
    return attacker_rank(recorded_adapts_to(row), float(row["gradient_match"]))
