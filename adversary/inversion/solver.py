"""The attack engine shared by every registered attack: batch, optimise, pick each target's best restart.

``invert(spec, views, options, seed, device)`` is a pure function of its arguments: no files, no global
state left changed (the deterministic-algorithms switch is restored), no ground truth. Each target's
reconstruction is the restart with the lowest objective of the attack's own, at that restart's best iterate
(L-BFGS never increases it; first-order steps may, and return their lowest-objective iterate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from adversary.inversion import clock
from adversary.inversion.optimizers import Budget, FirstOrderSettings, LbfgsSettings, first_order, ig_milestones, lbfgs
from adversary.inversion.options import OptimizationOptions
from adversary.inversion.problem import BatchedProblem, group_views
from adversary.inversion.spec import AttackSpec
from adversary.view import AttackerView, Reconstruction, TrajectoryPoint

DTYPES = {"float32": torch.float32, "float64": torch.float64}
PROGRESS_EVERY_S = 30.0  # how often a running attack logs how far it has got

logger = logging.getLogger("fedsim")


@dataclass(frozen=True)
class Attack:
    """A registered attack: ``attack(views, options, seed, device)`` -> one Reconstruction per view."""

    spec: AttackSpec

    def __call__(
        self, views: Sequence[AttackerView], options: OptimizationOptions, seed: int, device: torch.device
    ) -> list[Reconstruction]:
        return invert(self.spec, views, options, seed, device)


def invert(
    spec: AttackSpec,
    views: Sequence[AttackerView],
    options: OptimizationOptions,
    seed: int,
    device: torch.device,
    restart_ids: Sequence[int] | None = None,
) -> list[Reconstruction]:
    """Reconstruct every view; compatible views and all restarts run as one batched problem.

    ``restart_ids`` (default ``options.restart_ids()``) selects which restarts to run: restart r of
    target t always starts from ``init_seed(seed, t, r)``, so running restarts one at a time gives the same
    results as batching them. ``Reconstruction.seconds`` is
    the wall time of the batched group the view was solved in.

    ``options.time_limit`` (seconds, optional) bounds the whole call: past it, each group returns its best
    reconstructions so far (``Reconstruction.cut``, with the iterations it took), groups not started yet their
    initial guess.
    """
    time_limit = getattr(options, "time_limit", None)  # an attack's options may not have one
    deadline = clock.deadline_after(time_limit)
    restart_ids = options.restart_ids() if restart_ids is None else list(restart_ids)
    if not restart_ids:
        raise ValueError("invert: at least one restart is needed")
    results: dict[int, Reconstruction] = {}
    with _deterministic(options.deterministic):
        for group in group_views(views):
            start = time.perf_counter()
            budget = Budget(deadline)
            recs = _invert_group(spec, options, [views[i] for i in group], group, restart_ids, seed, device, budget)
            seconds = time.perf_counter() - start
            for index, rec in zip(group, recs, strict=True):
                results[index] = dataclasses.replace(rec, seconds=seconds)
    return [results[i] for i in range(len(views))]


def _invert_group(
    spec: AttackSpec,
    options: OptimizationOptions,
    views: list[AttackerView],
    target_ids: list[int],
    restart_ids: list[int],
    seed: int,
    device: torch.device,
    budget: Budget,
) -> list[Reconstruction]:
    dtype = DTYPES[options.precision]
    problem = BatchedProblem.build(spec, options, views, restart_ids, device, dtype)
    v0 = problem.initial(seed, target_ids, restart_ids)
    trajectories: list[list[TrajectoryPoint]] = [[] for _ in views]
    monitor = (
        trajectory_monitor(lambda v: problem.split(v)[0], options.log_every, trajectories)
        if options.log_every
        else None
    )
    heartbeat = progress_monitor(options, len(views), budget)
    watch = heartbeat if monitor is None else both(monitor, heartbeat)
    v, f = optimize(problem.evaluate, v0, options, spec, problem.project, watch, budget)
    images, _ = problem.split(v)
    recs = best_restarts(f, images, problem.labels_of(v), budget, trajectories=trajectories)
    if not problem.masks:
        return recs
    # each target's share of matched entries, over the parameters it matches (masks stack the targets first)
    kept = torch.stack([mask.flatten(start_dim=1).sum(dim=1) for mask in problem.masks]).sum(dim=0)
    total = sum(mask[0].numel() for mask in problem.masks)
    return [dataclasses.replace(rec, matched_fraction=float(kept[t]) / total) for t, rec in enumerate(recs)]


def progress_monitor(options: OptimizationOptions, targets: int, budget: Budget, every: float | None = None):
    """A monitor that logs, every ``every`` seconds (``PROGRESS_EVERY_S``), how far a long attack has got: its
    iteration of those asked, the best objective over its problems so far, and the time taken against its limit."""
    every = PROGRESS_EVERY_S if every is None else every
    started = time.perf_counter()
    state = {"next": started + every, "best": math.inf}
    asked = int(options.iterations or 0)
    limit = getattr(options, "time_limit", None)

    def monitor(iteration: int, v: torch.Tensor, f: torch.Tensor) -> None:
        now = time.perf_counter()
        if now < state["next"]:
            return
        state["next"] = now + every
        state["best"] = min(state["best"], float(finite_or_inf(f).min()))
        logger.info(
            "attack %s: iteration %d of %d on %d target(s) x %d restart(s), best objective %.4g, %.0f s%s",
            options.label,
            iteration,
            asked,
            targets,
            int(options.restarts),
            state["best"],
            now - started,
            f" of its {limit:.0f} s limit" if limit else "",
        )

    return monitor


def both(first: Callable, second: Callable) -> Callable:
    def monitor(iteration: int, v: torch.Tensor, f: torch.Tensor) -> None:
        first(iteration, v, f)
        second(iteration, v, f)

    return monitor


def optimize(
    evaluate: Callable,
    v0: torch.Tensor,
    options: OptimizationOptions,
    spec: AttackSpec,
    project: Callable | None,
    monitor: Callable | None,
    budget: Budget,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attack's optimizer (L-BFGS, or first-order with the spec's signed steps and step decay) on
    ``evaluate`` from the rows ``v0``: the final rows and their objectives."""
    iterations = int(options.iterations or 0)
    if options.optimizer == "lbfgs":
        return lbfgs(evaluate, v0, iterations, LbfgsSettings(lr=float(options.lr or 1.0)), monitor, budget)
    settings = FirstOrderSettings(
        method=str(options.optimizer),
        lr=float(options.lr or 0.0),
        signed=spec.signed,
        decay_milestones=ig_milestones(iterations) if spec.lr_decay else (),
    )
    return first_order(evaluate, v0, iterations, settings, project, monitor, budget)


def best_restarts(
    objectives: torch.Tensor,
    images: torch.Tensor,
    labels: torch.Tensor,
    budget: Budget | None = None,
    iterations: int | None = None,
    seconds: float = 0.0,
    trajectories: Sequence[Sequence[TrajectoryPoint]] | None = None,
) -> list[Reconstruction]:
    """Each target's restart with the lowest final objective (non-finite ones count as +inf).

    ``images`` (targets, restarts, C, H, W), ``labels`` (targets, restarts, ...) and ``objectives`` (one per
    row, targets x restarts); ``budget`` gives the iterations taken and whether the time limit cut them,
    else ``iterations``."""
    finals = finite_or_inf(objectives).reshape(images.shape[:2]).cpu()
    recs = []
    for t in range(len(finals)):
        best = int(torch.argmin(finals[t]))
        recs.append(
            Reconstruction(
                images=images[t, best].detach().to(device="cpu", dtype=torch.float32).clone(),
                labels=labels[t, best].to(torch.int64).clone(),
                objective=float(finals[t, best]),
                restart_objectives=tuple(float(value) for value in finals[t]),
                iterations=budget.iterations if budget is not None else int(iterations or 0),
                seconds=seconds,
                trajectory=tuple(trajectories[t]) if trajectories is not None else (),
                cut=budget.cut if budget is not None else False,
            )
        )
    return recs


def trajectory_monitor(images_of: Callable[[torch.Tensor], torch.Tensor], every: int, out: list[list[TrajectoryPoint]]):
    """Every ``every`` iterations, keep each target's best-so-far restart (by its current objective);
    ``images_of(v)`` gives the (targets, restarts, C, H, W) images of the optimised rows."""

    def monitor(iteration: int, v: torch.Tensor, f: torch.Tensor) -> None:
        if iteration % every:
            return
        with torch.no_grad():
            images = images_of(v)
        values = finite_or_inf(f).reshape(images.shape[:2])
        for t in range(len(values)):
            best = int(torch.argmin(values[t]))
            out[t].append(
                TrajectoryPoint(
                    iteration=iteration,
                    objective=float(values[t, best]),
                    images=images[t, best].detach().to(device="cpu", dtype=torch.float32).clone(),
                )
            )

    return monitor


def finite_or_inf(f: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(f), f, torch.full_like(f, math.inf))


@contextlib.contextmanager
def _deterministic(enabled: bool) -> Iterator[None]:
    """``torch.use_deterministic_algorithms`` (warn-only) and deterministic cuDNN within the call, restored after.

    Warn-only: an operation without a deterministic kernel warns instead of aborting a long attack, and
    cuBLAS needs CUBLAS_WORKSPACE_CONFIG set before CUDA starts, which a library call cannot do.
    """
    if not enabled:
        yield
        return
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.backends.cudnn.deterministic = previous[2]
        torch.backends.cudnn.benchmark = previous[3]
