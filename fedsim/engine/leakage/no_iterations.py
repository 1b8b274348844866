"""An attack whose time limit ran out before its first iteration finished: a row of its own, never a score.

Such an attack's "best reconstruction so far" is its starting point (random, or a prior's guess): scoring it would
put a guess in the leakage table with a verdict (``at floor``, which reads as an attack that ran and failed). Its
row says instead that no iteration ran, and how to give the attack one.
"""

from __future__ import annotations

from typing import Any

from adversary.view import AttackerView, Reconstruction

NO_ITERATIONS = "no-iterations"


def ran_no_iteration(reconstruction: Reconstruction) -> bool:
    """Whether a time limit stopped the attack before its first iteration (``cut`` with 0 iterations)."""
    return reconstruction.cut and reconstruction.iterations == 0


def no_iterations_row(view: AttackerView, options: Any, extra_fields: dict[str, Any]) -> dict[str, Any]:
    """The attack row of ``view`` for an attack that ran no iteration: its status and why, no score, no verdict."""
    limit = getattr(options, "time_limit", None)
    said = f"time_limit = {limit:g} s" if limit else "the time limit (adversary.budget.max_seconds)"
    return {
        "round": view.round,
        "event": "attack",
        "tap": view.tap,
        "target": view.target,
        "attack": options.label,
        "status": NO_ITERATIONS,
        **extra_fields,
        "cut": True,
        "iterations": 0,
        "error": f"{said} ran out before {options.label}'s first iteration finished: nothing to score "
        "(allowed: a limit longer than one iteration, or none)",
    }
