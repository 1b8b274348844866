"""A raced portfolio: every attack starts on a small budget, and only the leaders get more (successive halving).

The unraced portfolio (``saturation.run_portfolio``) runs every attack at its full budget before it ranks them, so
most of its time goes to attacks that lose: on paper 003's set-up ``ig@geiping-2020`` (4,800 iterations x 8
restarts) took about half of the first pass and was never the pick. ``race_portfolio`` runs the optimisation
attacks in rungs instead:

* rung 0 runs every attack at ``iterations / growth**rungs`` and one restart; each later rung multiplies the
  iterations by ``growth``, and the last one (rung ``rungs``) is the attack's own budget, its restarts included.
  Every rung before the last thus compares the attacks at one restart each: a preset of 8 restarts would otherwise
  get 2-8 times the compute of a one-restart attack at each rung, win on the best of its restarts rather than on
  its method, and stay in the race at that cost (on the defense table's MNIST set-up the two 8 x 4,800 presets
  took 87 % of rungs 1-2 when restarts grew alongside the iterations);
* after each rung before the last, every target keeps the attacks ranked best by ``gradient_match``, attacks
  built for a defense in force first (``adversary.ranking``: the attacker-side yardstick of the saturation step,
  never the ground truth): ``1/growth`` of those still in the race
  on that target, and never fewer than ``budget.finalists``; the cut before the last rung keeps the finalists only
  (halving 9 attacks over 3 rungs would leave 2 to run their whole budget where one was asked for). An attack
  runs a rung only on the targets it is still in the race on, so a rung costs what its survivors cost;
* a target whose race is down to ``budget.finalists`` attacks goes straight to the last rung;
* after the last rung the saturation step takes over as before (``saturation.saturate``): each target's
  ``leaders`` best finalists get more iterations and restarts until more stops changing the answer, each leader on
  the targets it leads. The race's last rung already is such a growth: where going from the finalist's previous
  rung to its own budget (iterations and restarts both grown) changed no target's answer, by the saturation
  step's own rule, the finalist is saturated without another pass; elsewhere the passes start from its own budget.

With one finalist (the default) this is plain successive halving, 7 attacks -> 4 -> 2 -> 1 over 3 rungs: on paper
003's set-up the IG presets match the update's direction well at a fraction of their budget, where L-BFGS DLG has
not converged yet, so a floor of two finalists kept ``ig@geiping-2020`` to its full 8 x 4,800 on every target.

An attack left behind keeps the result of the rung it was eliminated at (``Reconstruction.eliminated_at``; its
``saturation`` is "not leading"), and its rows say so. An attack the yardstick cannot rank on a target (a view it
cannot simulate) is not raced there: it runs once at its own budget, as in the unraced portfolio, and never leads.
Attacks that cannot saturate (closed-form ones) run once at their own budget.

Restarting a longer rung from the start, rather than continuing the shorter one, costs at most
``1 + 1/growth + 1/growth**2 + ...`` (twice, at growth 2) of a survivor's own budget, and keeps every rung an
ordinary run of the attack: an attack's schedule (IG's step decay) is laid out over the iterations it is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from adversary.inversion import clock
from adversary.inversion.options import AttackOptions
from adversary.inversion.saturation import (
    CAPPED,
    NOT_LEADING,
    SaturationBudget,
    SmallerRun,
    gradient_match,
    input_range,
    run_portfolio,
    saturable,
    saturate,
)
from adversary.ranking import attacker_rank
from adversary.view import AttackerView, Reconstruction

logger = logging.getLogger("fedsim")

# how a portfolio runs one attack: ``run(options)`` on every target, ``run(options, targets)`` on those only
RunOn = Callable[..., list[Reconstruction]]
Outcome = list[Reconstruction] | BaseException


def portfolio(
    entries: Sequence[tuple[AttackOptions, RunOn]],
    views: Sequence[AttackerView],
    budget: SaturationBudget,
    device: torch.device,
) -> list[Outcome]:
    """The raced portfolio where ``budget.rungs`` asks for one, else the unraced one (every attack at its full
    budget first); per entry its reconstructions (one per view) or the error it raised."""
    if budget.rungs > 0:
        return race_portfolio(entries, views, budget, device)
    return run_portfolio(entries, views, budget, device)


def rung_iterations(iterations: int, rung: int, rungs: int, growth: int) -> int:
    """The iterations of ``rung`` (0 .. ``rungs``) for an attack whose own budget is ``iterations``."""
    return max(1, math.ceil(iterations / growth ** (rungs - rung)))


def rung_restarts(restarts: int, rung: int, rungs: int) -> int:
    """The restarts of ``rung``: one before the last rung, the attack's own ``restarts`` at it (restart 0 always
    starts from the same point, so a rung's restart is the first of the last rung's)."""
    return restarts if rung >= rungs else 1


def kept(ranked: int, finalists: int, growth: int) -> int:
    """How many of ``ranked`` attacks a target keeps after a rung: 1/growth of them, never fewer than ``finalists``."""
    return min(ranked, max(finalists, math.ceil(ranked / growth)))


def _run_on(run: RunOn, options: AttackOptions, targets: list[int], count: int) -> list[Reconstruction]:
    return run(options) if targets == list(range(count)) else run(options, targets)


def _matched(
    views: Sequence[AttackerView], targets: list[int], recs: list[Reconstruction], device: torch.device
) -> list[float | None]:
    """Each result's gradient match on its target (None where the yardstick cannot simulate the views)."""
    with contextlib.suppress(Exception):
        matches = gradient_match([views[t] for t in targets], recs, device)
        return [match if math.isfinite(match) else None for match in matches]
    return [None] * len(targets)


class Race:
    """The state of one race: per attack and target the latest result, and where each attack still runs."""

    def __init__(self, entries: Sequence[tuple[AttackOptions, RunOn]], views: Sequence[AttackerView], device) -> None:
        self.entries, self.views, self.device = entries, views, device
        self.results: dict[int, dict[int, Reconstruction]] = {a: {} for a in range(len(entries))}
        # per attack and target, the iterations and restarts its latest result was asked for, and the run before it
        self.asked: dict[int, dict[int, tuple[int, int]]] = {a: {} for a in range(len(entries))}
        self.smaller: dict[int, dict[int, SmallerRun]] = {a: {} for a in range(len(entries))}
        self.errors: dict[int, BaseException] = {}
        self.alive: list[list[int]] = [
            [a for a, (options, _) in enumerate(entries) if saturable(options)] for _ in views
        ]

    def targets_of(self, attack: int, among: Sequence[int]) -> list[int]:
        return [t for t in among if attack in self.alive[t]]

    def run(self, attack: int, options: AttackOptions, targets: list[int], rung: str) -> None:
        """``options`` on ``targets``: the results replace the attack's earlier ones there, with their match."""
        started = time.perf_counter()
        try:
            recs = _run_on(self.entries[attack][1], options, targets, len(self.views))
        except Exception as error:  # one failing attack must not take the portfolio down
            if not self.results[attack]:
                self.errors[attack] = error
            for t in targets:
                self.drop(attack, t)
            logger.warning("race: %s failed at %s (%s)", options.label, rung, error)
            return
        matches = _matched(self.views, targets, recs, self.device) if saturable(options) else [None] * len(targets)
        asked = (int(getattr(options, "iterations", 0) or 0), int(getattr(options, "restarts", 1) or 1))
        for t, rec, match in zip(targets, recs, matches, strict=True):
            if t in self.results[attack]:
                self.smaller[attack][t] = SmallerRun(self.results[attack][t], *self.asked[attack][t])
            self.results[attack][t] = dataclasses.replace(rec, gradient_match=match)
            self.asked[attack][t] = asked
        shown = [m for m in matches if m is not None]
        logger.info(
            "race %s: %s at %d iterations x %d restarts on %d target(s): gradient match %s (%.0f s)",
            rung,
            options.label,
            int(getattr(options, "iterations", 0) or 0),
            int(getattr(options, "restarts", 1) or 1),
            len(targets),
            f"{min(shown):.3g}-{max(shown):.3g}" if shown else "n/a",
            time.perf_counter() - started,
        )

    def contenders(self, target: int) -> list[int]:
        """The attacks still in the race on ``target`` that can be ranked there (or have not run yet)."""
        return [a for a in self.alive[target] if target not in self.results[a] or self.match(a, target) is not None]

    def drop(self, attack: int, target: int) -> None:
        if attack in self.alive[target]:
            self.alive[target].remove(attack)

    def match(self, attack: int, target: int) -> float | None:
        rec = self.results[attack].get(target)
        return rec.gradient_match if rec is not None else None

    def ranked(self, target: int) -> list[int]:
        """The attacks still in the race on ``target`` that the yardstick ranks, best first, as the attacker ranks
        (``adversary.ranking``: attacks built for a defense in force first, then the lowest gradient match)."""
        matches = {a: m for a in self.alive[target] if (m := self.match(a, target)) is not None}
        return sorted(matches, key=lambda a: (attacker_rank(self.entries[a][0].adapts_to, matches[a]), a))

    def cut(self, target: int, rung: int, keep: int) -> list[int]:
        """Keep the target's ``keep`` best attacks by the attacker's ranking; the others are eliminated at ``rung``
        (returned). Attacks the yardstick could not rank stay, unranked, to run once at their own budget."""
        ranked = self.ranked(target)
        out = ranked[keep:]
        for a in out:
            self.drop(a, target)
            self.results[a][target] = dataclasses.replace(self.results[a][target], eliminated_at=rung)
        return out


def race_portfolio(
    entries: Sequence[tuple[AttackOptions, RunOn]],
    views: Sequence[AttackerView],
    budget: SaturationBudget,
    device: torch.device,
) -> list[Outcome]:
    """Every attack of ``entries`` raced (module docstring), then the saturation step on each target's leaders."""
    race = Race(entries, views, device)
    rungs, growth = budget.rungs, budget.growth
    every = list(range(len(views)))
    for rung in range(rungs):
        open_targets = [t for t in every if len(race.contenders(t)) > budget.finalists]
        if not open_targets:
            break
        for attack, (options, _) in enumerate(entries):
            targets = race.targets_of(attack, open_targets)
            if not targets or not saturable(options):
                continue
            if rung > 0 and all(race.match(attack, t) is None for t in targets):
                continue  # the yardstick cannot rank it here: it waits for its own budget
            smaller = {
                "iterations": rung_iterations(int(options.iterations), rung, rungs, growth),
                "restarts": rung_restarts(int(options.restarts), rung, rungs),
                "first_restart": 0,
            }
            race.run(attack, options.model_copy(update=smaller), targets, f"rung {rung}/{rungs}")
        for t in open_targets:
            ranked = len([a for a in race.alive[t] if race.match(a, t) is not None])
            # the cut before the attacks' own budgets leaves the finalists alone, however many started
            keep = budget.finalists if rung == rungs - 1 else kept(ranked, budget.finalists, growth)
            out = race.cut(t, rung, keep)
            if out:
                left = ", ".join(entries[a][0].label for a in race.alive[t])
                names = ", ".join(entries[a][0].label for a in out)
                logger.info("race rung %d/%d, target %d: eliminated %s; left %s", rung, rungs, t, names, left)
    for attack, (options, _) in enumerate(entries):  # the last rung: each attack's own budget
        targets = race.targets_of(attack, every) if saturable(options) else every
        if targets:
            race.run(attack, options, targets, f"rung {rungs}/{rungs}" if saturable(options) else "once")
    _saturate_leaders(race, budget)
    return _outcomes(race)


def _saturate_leaders(race: Race, budget: SaturationBudget) -> None:
    """The saturation step on each target's ``budget.leaders`` best attacks, each on the targets it leads."""
    led: dict[int, list[int]] = {}
    for t in range(len(race.views)):
        for a in race.ranked(t)[: budget.leaders]:
            led.setdefault(a, []).append(t)
    for attack in range(len(race.entries)):
        for t, rec in race.results[attack].items():
            if saturable(race.entries[attack][0]) and t not in led.get(attack, []):
                race.results[attack][t] = dataclasses.replace(rec, saturation=NOT_LEADING)
    started = clock.now()
    for position, (attack, targets) in enumerate(sorted(led.items())):
        options, run = race.entries[attack]
        seconds = None
        if budget.max_seconds is not None:  # what is left is shared by the leaders still to come
            seconds = (budget.max_seconds - (clock.now() - started)) / (len(led) - position)
        first = [race.results[attack][t] for t in targets]
        views = [race.views[t] for t in targets]

        def run_here(chosen: Any, run: RunOn = run, targets: list[int] = targets) -> list[Reconstruction]:
            return _run_on(run, chosen, targets, len(race.views))

        try:
            ranges = [input_range(view) for view in views]
            smaller = [race.smaller[attack].get(t) for t in targets]
            saturated = saturate(run_here, options, first, budget, seconds, ranges, smaller)  # type: ignore[arg-type]
        except Exception:  # keep the last rung, unsaturated, if a longer pass fails (memory)
            saturated = [dataclasses.replace(rec, saturation=CAPPED) for rec in first]
        matches = _matched(race.views, targets, saturated, race.device)
        for t, rec, match in zip(targets, saturated, matches, strict=True):
            race.results[attack][t] = dataclasses.replace(rec, gradient_match=match)


def _outcomes(race: Race) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for attack in range(len(race.entries)):
        if attack in race.errors:
            outcomes.append(race.errors[attack])
        else:
            outcomes.append([race.results[attack][t] for t in range(len(race.views))])
    return outcomes
