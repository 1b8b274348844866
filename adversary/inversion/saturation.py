"""The saturation step of a portfolio: the leading attacks get more iterations and restarts until their own
objective stops improving, or the budget runs out.

An attack's reported leakage is only as good as the budget it ran with: DLG at 300 L-BFGS iterations reaches
SSIM 0.2 on a CIFAR-10 image where 1,300 reach 0.998. So after every attack of a portfolio has run once on a
group of targets, ``run_portfolio``

1. ranks the attacks per target by ``gradient_match`` (1 - cosine between the update the reconstruction would
   produce and the observed one), attacks built for a defense in force first (``adversary.ranking``): an
   attacker-side yardstick (never the ground truth) that compares attacks whose own objectives are in different
   units;
2. takes the ``leaders`` best optimisation attacks of each target and reruns each (``saturate``) with
   ``growth`` times the iterations (then, once those stop helping, the restarts), again and again, keeping per
   target the result with the lowest objective of the attack's own, until neither more iterations nor more
   restarts change any target's answer: ``saturated``; or until ``max_iterations`` / ``max_restarts`` /
   ``max_seconds`` stop it first: ``capped``, and the leakage it reports is a lower bound. A pass changes a
   target's answer when it lowers the objective by more than ``tolerance`` (relative) *and* moves the
   reconstruction by more than ``resolution`` (root-mean-square, as a fraction of the valid input range: 1/255 is
   one grey level of an 8-bit image). The second condition matters where the attack can match the update exactly:
   there the objective keeps falling by orders of magnitude towards float precision while the image no longer
   changes at any resolution a score can see. Both criteria read only the attacker's own results.

Restart r of target t always starts from the same point (``problem.init_seed``), so a pass with more restarts
runs only the new ones (``first_restart``) and keeps the best of old and new: a pass cannot lose what an earlier
one found, and each target keeps its best over passes anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from typing_extensions import TypeIs

from adversary.inversion import clock
from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.problem import BatchedProblem
from adversary.inversion.spec import AttackSpec
from adversary.ranking import attacker_rank
from adversary.view import AttackerView, Reconstruction

SATURATED, CAPPED, NOT_LEADING, OFF = "saturated", "capped", "not leading", "off"

logger = logging.getLogger("fedsim")


@dataclass(frozen=True)
class SaturationBudget:
    """How far the saturation step may go (``adversary.budget``)."""

    leaders: int = 2  # attacks saturated per target, the best by gradient_match
    growth: int = 2  # factor on iterations and restarts per pass
    tolerance: float = 0.01  # relative improvement of the objective below which an attack has saturated
    resolution: float = 1 / 255  # RMS move of a reconstruction (fraction of the input range) that changes nothing
    max_iterations: int = 20_000  # per restart
    max_restarts: int = 16
    max_seconds: float | None = None  # all saturation passes of one group of targets together
    rungs: int = 0  # a raced portfolio's rungs before each attack's own budget (adversary.inversion.race); 0: unraced
    finalists: int = 1  # a raced portfolio: attacks per target that run their own budget


Run = Callable[[AttackOptions], list[Reconstruction]]


def saturable(options: AttackOptions) -> TypeIs[OptimizationOptions]:
    """Whether more budget can change the attack's answer: an optimisation attack with iterations and restarts."""
    return isinstance(options, OptimizationOptions)


def improvement(before: float, after: float) -> float:
    """The relative decrease of an objective (0 when it did not decrease, or was 0 or not finite before)."""
    if not math.isfinite(after) or after >= before:
        return 0.0
    if not math.isfinite(before):
        return math.inf
    return (before - after) / abs(before) if before > 0 else 0.0


def moved(before: torch.Tensor, after: torch.Tensor, input_range: torch.Tensor | None) -> float:
    """Root-mean-square change from ``before`` to ``after`` (N, C, H, W), as a fraction of the per-channel valid
    input range (``input_range``: C values; None: the range is unknown, every change counts as a move)."""
    if input_range is None:
        return math.inf
    scale = input_range.to(torch.float64).reshape(1, -1, 1, 1)
    change = (after.to(torch.float64) - before.to(torch.float64)) / scale
    return float(change.pow(2).mean().sqrt())


@dataclass(frozen=True)
class SmallerRun:
    """An earlier run of the same attack on the same target with less budget (a raced portfolio's previous rung):
    its result, and the iterations and restarts it was asked for."""

    result: Reconstruction
    iterations: int
    restarts: int


def changed_answer(
    before: Reconstruction, after: Reconstruction, width: torch.Tensor | None, budget: SaturationBudget
) -> bool:
    """Whether ``after`` (more budget) changed ``before``'s answer: a lower objective by more than the tolerance
    *and* a reconstruction moved by more than the resolution (module docstring)."""
    return (
        improvement(before.objective, after.objective) > budget.tolerance
        and moved(before.images, after.images, width) > budget.resolution
    )


def stalled_already(
    smaller: Sequence[SmallerRun | None] | None,
    first: Sequence[Reconstruction],
    size: dict[str, int],
    ranges: Sequence[torch.Tensor | None],
    budget: SaturationBudget,
) -> set[str]:
    """The dimensions whose last growth is already known to have changed no target's answer: where every target
    has a smaller run of the attack (``smaller``), neither run was cut, and growing to ``first``'s budget changed
    no answer, each dimension that grew on every target from there (both, after a raced portfolio's rung)."""
    if smaller is None or any(run is None or run.result.cut for run in smaller) or any(rec.cut for rec in first):
        return set()
    runs = [run for run in smaller if run is not None]
    if any(changed_answer(run.result, rec, width, budget) for run, rec, width in zip(runs, first, ranges, strict=True)):
        return set()
    stalled = {dim for dim in size if all(getattr(run, dim) < size[dim] for run in runs)}
    if stalled:
        logger.info("saturation: the last growth (%s) changed no answer", " and ".join(sorted(stalled)))
    return stalled


def saturate(
    run: Run,
    options: OptimizationOptions,
    first: Sequence[Reconstruction],
    budget: SaturationBudget,
    seconds: float | None,
    input_ranges: Sequence[torch.Tensor | None] | None = None,
    smaller: Sequence[SmallerRun | None] | None = None,
) -> list[Reconstruction]:
    """``options``' results ``first`` (one per target) rerun with more budget until neither more iterations nor
    more restarts change any target's answer (module docstring), or the budget (``seconds`` for this attack) runs
    out; per target the lowest-objective result, marked saturated or capped. ``input_ranges``: per target the
    per-channel width of the valid inputs the ``resolution`` is a fraction of (None: objective only).

    One dimension grows per pass (``budget.growth`` times), iterations first: a pass then costs ``growth`` times
    the last, not its square. Once more iterations stop helping, restarts grow (from the iterations that still
    helped), and such a pass runs only the added restarts; an improvement from either lets both grow again.
    Saturated: the last growth of each dimension changed no target; capped: a dimension reached its cap (or the
    time ran out) before it stopped helping.

    ``smaller``: per target a run with less budget that ``first`` grew from (a raced portfolio's previous rung).
    Where that growth changed no target's answer, it counts as the last growth of each dimension it grew, by the
    same rule as a pass: an attack whose last rung changed nothing is saturated without another pass.
    """
    best = list(first)
    ranges = list(input_ranges) if input_ranges is not None else [None] * len(best)
    size = {"iterations": int(options.iterations), "restarts": int(options.restarts)}
    caps = {"iterations": budget.max_iterations, "restarts": budget.max_restarts}
    deadline = clock.now() + seconds if seconds is not None else None  # seconds <= 0: no time left
    stalled = stalled_already(smaller, first, size, ranges, budget)  # dimensions whose last growth changed nothing
    phase = "iterations"  # the dimension that helped last is grown again first
    while True:
        grown = {dim: min(value * budget.growth, max(caps[dim], value)) for dim, value in size.items()}
        growable = [dim for dim in (phase, *(d for d in size if d != phase)) if grown[dim] != size[dim]]
        candidates = [dim for dim in growable if dim not in stalled]
        remaining = deadline - clock.now() if deadline is not None else None
        if not candidates or (remaining is not None and remaining <= 0):
            status = SATURATED if not candidates and stalled == set(size) else CAPPED
            break
        dim = candidates[0]
        if dim == "restarts":  # restart r always starts from the same point: run only the added ones
            update: dict[str, Any] = {
                "iterations": size["iterations"],
                "restarts": grown["restarts"] - size["restarts"],
                "first_restart": size["restarts"],
            }
        else:
            update = {**size, "iterations": grown["iterations"], "first_restart": 0}
        if remaining is not None:
            update["time_limit"] = min(remaining, float(options.time_limit or math.inf))
        started = time.perf_counter()
        results = run(options.model_copy(update=update))
        before, size[dim] = size[dim], grown[dim]
        logger.info(
            "saturation: %s at %d iterations x %d restarts: objective %s (%.0f s)",
            options.label,
            size["iterations"],
            size["restarts"],
            ", ".join(f"{rec.objective:.3g}" for rec in results),
            time.perf_counter() - started,
        )
        changed = [
            changed_answer(old, new, width, budget) for old, new, width in zip(best, results, ranges, strict=True)
        ]
        best = [
            dataclasses.replace(new, restarts=size["restarts"]) if new.objective < old.objective else old
            for old, new in zip(best, results, strict=True)
        ]
        if any(result.cut for result in results):
            status = CAPPED  # the time limit stopped a pass: what more time would give is unknown
            break
        if not any(changed):
            stalled.add(dim)
            size[dim] = before  # the other dimension grows from the budget that still helped, not the larger one
        else:
            stalled.clear()
            phase = dim
    return [dataclasses.replace(rec, saturation=status) for rec in best]


def input_range(view: AttackerView) -> torch.Tensor | None:
    """Per channel, the width of the view's valid inputs (None where the attacker does not know it)."""
    if view.input_bounds is None:
        return None
    low, high = view.input_bounds
    return (high - low).reshape(-1).detach().cpu()


def gradient_match(views: Sequence[AttackerView], recs: Sequence[Reconstruction], device: torch.device) -> list[float]:
    """Per target, 1 - cosine between the update its reconstruction simulates and the observed update, over every
    entry of every parameter (float64; the views' own threat model), with the labels the reconstruction carries:
    an attack that found its labels jointly (DLG) returns its images in its own order, which labels recovered from
    the update (sorted by class) would not follow."""
    yardstick = OptimizationOptions.model_construct(
        name="gradient-match", loss="cosine", regularizers=[], restarts=1, init="zeros"
    )
    if all(len(rec.labels.reshape(-1)) == view.num_samples for view, rec in zip(views, recs, strict=True)):
        views = [dataclasses.replace(view, labels=rec.labels.reshape(-1)) for view, rec in zip(views, recs)]
    problem = BatchedProblem.build(AttackSpec(name="gradient-match"), yardstick, views, [0], device, torch.float64)
    with torch.no_grad():
        return [
            float(problem.objective_at(t, rec.images.to(device=device, dtype=torch.float64)))
            for t, rec in enumerate(recs)
        ]


def leaders(
    matches: Sequence[Sequence[float | None]], count: int, adapts_to: Sequence[Collection[str]] | None = None
) -> set[int]:
    """Indices of the attacks among the ``count`` best on at least one target, ranked as the attacker ranks
    (``adversary.ranking``: attacks built for a defense in force first, then the lowest gradient match);
    ``matches[a][t]`` is attack a's match on target t (None: the attack is not ranked), ``adapts_to[a]`` the
    defenses attack a models (none: every attack is generic)."""
    modelled = adapts_to if adapts_to is not None else [()] * len(matches)
    chosen: set[int] = set()
    targets = max((len(row) for row in matches), default=0)
    for t in range(targets):
        ranked = sorted(
            (attacker_rank(modelled[a], match), a)
            for a, row in enumerate(matches)
            if t < len(row) and (match := row[t]) is not None and math.isfinite(match)
        )
        chosen |= {a for _, a in ranked[:count]}
    return chosen


def run_portfolio(
    entries: Sequence[tuple[AttackOptions, Run]],
    views: Sequence[AttackerView],
    budget: SaturationBudget,
    device: torch.device,
) -> list[list[Reconstruction] | BaseException]:
    """Every attack of ``entries`` (options, how to run them) once on ``views``, then the saturation step on the
    leading ones; per entry its reconstructions (one per view), or the error it raised."""
    outcomes: list[list[Reconstruction] | BaseException] = []
    for options, run in entries:
        started = time.perf_counter()
        try:
            outcomes.append(run(options))
        except Exception as error:  # one failing attack must not take the portfolio down
            outcomes.append(error)
        logger.info("portfolio: %s ran once (%.0f s)", options.label, time.perf_counter() - started)
    matches: list[Sequence[float | None]] = [[None] * len(views) for _ in entries]
    for index, ((options, _), outcome) in enumerate(zip(entries, outcomes, strict=True)):
        if isinstance(outcome, BaseException) or not saturable(options):
            continue
        with contextlib.suppress(Exception):  # a view the yardstick cannot simulate: the attack is not ranked
            matches[index] = gradient_match(views, outcome, device)
        outcomes[index] = [
            dataclasses.replace(rec, gradient_match=match, saturation=NOT_LEADING)
            for rec, match in zip(outcome, matches[index], strict=True)
        ]
    chosen = sorted(leaders(matches, budget.leaders, [options.adapts_to for options, _ in entries]))
    started = clock.now()
    for position, index in enumerate(chosen):
        options, run = entries[index]
        first = outcomes[index]
        assert not isinstance(first, BaseException)
        seconds = None
        if budget.max_seconds is not None:  # what is left is shared by the leaders still to come
            seconds = (budget.max_seconds - (clock.now() - started)) / (len(chosen) - position)
        try:
            ranges = [input_range(view) for view in views]
            saturated = saturate(run, options, first, budget, seconds, ranges)  # type: ignore[arg-type]
        except Exception:  # keep the first pass, unsaturated, if a longer one fails (memory)
            outcomes[index] = [dataclasses.replace(rec, saturation=CAPPED) for rec in first]
            continue
        # the rows report the yardstick of the result they hold
        with contextlib.suppress(Exception):
            matched = gradient_match(views, saturated, device)
            saturated = [dataclasses.replace(rec, gradient_match=m) for rec, m in zip(saturated, matched, strict=True)]
        outcomes[index] = saturated
    return outcomes
