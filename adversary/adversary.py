"""The adversary of a run: collects what its tap saw, and attacks it beside the training.

Taps hand over ``TappedUpdate`` records as messages flow; when the server closes a round, the
round's views are built and submitted as attack jobs to the attack workers (separate processes, see
``adversary.workers``), so training never waits for an attack. Finished reconstructions go to
``on_result`` (the scoring side, outside the adversary) as they complete, one at a time in a thread of
this process; ``finish`` waits for the stragglers at the end of the run.

With a backlog, a round's tapped updates stay on disk until all its jobs have reported, and ``resume``
re-attacks what a killed run left unfinished.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

import torch

from adversary.attack_progress import AttackProgress
from adversary.inversion.options import AttackOptions
from adversary.inversion.problem import group_views
from adversary.inversion.saturation import SaturationBudget
from adversary.taps import TappedUpdate
from adversary.threat_models import (
    AggregateNoise,
    Architecture,
    LabelGrant,
    ThreatModel,
    TrainingHyperparameters,
    build_views,
)
from adversary.view import AttackerView, Reconstruction
from adversary.workers import (
    AttackJob,
    AttackWorkers,
    PortfolioJob,
    ProcessAttackWorkers,
    best_of,
    restart_shares,
    settings_for,
)
from fedsim.core.seeding import derive_seed
from fedsim.core.stopping import StopSignal

logger = logging.getLogger("fedsim")

_STOP_POLL_S = 0.2  # how often finish() looks for a stop while it waits

ResultSink = Callable[[AttackerView, AttackOptions, Reconstruction], None]
# the tuning task of an attack on a group of views (adversary.inversion.tuning), or None: it runs untuned
Tuner = Callable[[AttackOptions, list[AttackerView]], Any]
FailureSink = Callable[[AttackerView, AttackOptions, BaseException], None]


class WorkerResources(Protocol):
    cpus: float  # torch threads of each attack worker


class BudgetSettings(Protocol):
    """``adversary.budget``: the saturation step of `attacks: strongest`."""

    saturate: bool
    leaders: int
    growth: int
    tolerance: float
    resolution: float
    max_iterations: int
    max_restarts: int
    max_seconds: float | None
    race: bool
    rungs: int
    finalists: int


def saturation_budget(config: Any) -> SaturationBudget | None:
    """The saturation step's budget where it applies (`attacks: strongest` with ``adversary.budget.saturate``)."""
    budget: BudgetSettings | None = getattr(config, "budget", None)
    if getattr(config, "portfolio", "listed") != "strongest" or budget is None or not budget.saturate:
        return None
    return SaturationBudget(
        leaders=budget.leaders,
        growth=budget.growth,
        tolerance=budget.tolerance,
        resolution=budget.resolution,
        max_iterations=budget.max_iterations,
        max_restarts=budget.max_restarts,
        max_seconds=budget.max_seconds,
        rungs=budget.rungs if budget.race else 0,
        finalists=budget.finalists,
    )


class AdversarySettings(ThreatModel, Protocol):
    """The ``adversary`` section as the adversary reads it: its threat model, its attacks and their workers."""

    @property
    def attacks(self) -> Sequence[AttackOptions]:
        """The attacks, resolved against the run."""

    @property
    def workers(self) -> int:
        """Attack worker processes at once."""

    @property
    def resources(self) -> WorkerResources:
        """What each worker may use."""

    def attacks_round(self, server_round: int) -> bool:
        """Whether round ``server_round`` is attacked."""


class Backlog(Protocol):
    """Where a round's tapped updates wait until its attacks are done (fedsim.rundir.backlog)."""

    def save(self, server_round: int, updates: list[TappedUpdate]) -> None: ...
    def load(self, server_round: int) -> list[TappedUpdate]: ...
    def rounds(self) -> list[int]: ...
    def discard(self, server_round: int) -> None: ...


def recorded_attacks(
    rows: Sequence[dict[str, Any]], server_round: int, attacks: Sequence[AttackOptions]
) -> set[tuple[int, str]]:
    """(attack index, target) pairs of ``attacks`` that already have a row for ``server_round``.

    Rows name the attack (with its preset: ``AttackOptions.label``), not its position in the config: the j-th
    attack of a label counts as done for a target once j rows of that label and target exist (counting only the
    attacks that run on that target).
    """
    counts = Counter(
        (row["attack"], row["target"])
        for row in rows
        if row.get("event") == "attack" and row.get("round") == server_round
    )
    done = set()
    for (name, target), count in counts.items():
        runs_on_target = [
            i for i, options in enumerate(attacks) if options.label == name and options.applies_to(target)
        ]
        done |= {(index, target) for index in runs_on_target[:count]}
    return done


def split_targets(views: list[AttackerView], workers: int) -> list[list[AttackerView]]:
    """``views`` in ``workers`` shares of consecutive targets as even as can be (fewer when there are fewer targets):
    one portfolio runs its targets in one process, so a round's single group would keep every other worker idle.
    A share is still one batched problem per attack; the targets' ranking and saturation are per target anyway."""
    count = max(1, min(workers, len(views)))
    size, extra = divmod(len(views), count)
    shares, start = [], 0
    for share in range(count):
        end = start + size + (1 if share < extra else 0)
        shares.append(views[start:end])
        start = end
    return shares


class Adversary:
    def __init__(
        self,
        config: AdversarySettings,
        architecture: Architecture,
        training: TrainingHyperparameters,
        seed: int,
        device: torch.device,
        on_result: ResultSink,
        on_failure: FailureSink,
        grant_labels: LabelGrant | None = None,
        backlog: Backlog | None = None,
        workers: AttackWorkers | None = None,
        tuner: Tuner | None = None,
        aggregate_noise: AggregateNoise | None = None,
    ) -> None:
        """``workers``: where the jobs run; by default ``adversary.workers`` spawned processes with
        ``adversary.resources.cpus`` torch threads each, on ``device``. ``tuner``: the tuning task of an attack on
        a group of views, which the worker runs before the attack (None: attacks run with their own settings).
        ``aggregate_noise``: the noise the aggregation protocol puts into the aggregate it releases, from its public
        parameters (SecAgg+'s quantisation; None: none known), handed to the aggregate's views."""
        self.config = config
        self.architecture = architecture
        self.training = training
        self.seed = seed
        self.device = device
        self.on_result = on_result
        self.on_failure = on_failure
        self.grant_labels = grant_labels
        self.backlog = backlog
        self.tuner = tuner
        self.aggregate_noise = aggregate_noise
        self._open_jobs: dict[int, int] = {}  # round -> attack jobs not yet reported
        self._round_models: dict[int, torch.nn.Module] = {}  # rounds a malicious server sent its own module in
        self._updates: dict[int, list[TappedUpdate]] = defaultdict(list)
        self._lock = threading.Lock()
        self.workers = workers or ProcessAttackWorkers(settings_for(config.workers, config.resources.cpus, device))
        # Results are scored one at a time, in this process: the scorer holds the truth, the workers never do.
        self._scoring = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedsim-scoring")
        self._jobs: list[Future] = []
        self.progress = AttackProgress()  # said while finish() waits for the attacks
        self._reports: list[Future] = []  # one scoring task per finished job
        self._reported = threading.Condition()
        self._abandoned = False  # after abandon(): jobs that end are not reported

    def observe(self, update: TappedUpdate) -> None:
        """Sink for the tap: keep what the configured tap saw in the rounds under attack."""
        if update.tap == self.config.tap and self.config.attacks_round(update.round):
            with self._lock:
                self._updates[update.round].append(update)

    def set_round_model(self, server_round: int, module: torch.nn.Module) -> None:
        """The module a malicious server sent in ``server_round``: that round's views are of it."""
        with self._lock:
            self._round_models[server_round] = module

    def round_finished(self, server_round: int) -> int:
        """Submit the round's attacks (before the round is committed); returns how many jobs were queued."""
        with self._lock:
            updates = self._updates.pop(server_round, [])
        if not updates:
            return 0
        if self.backlog is not None:
            self.backlog.save(server_round, updates)
        return self._submit(server_round, updates, done=set())

    def resume(self, rows: Sequence[dict[str, Any]], last_round: int) -> int:
        """Re-attack the committed rounds whose attacks a killed run left unfinished; returns jobs queued."""
        if self.backlog is None:
            return 0
        queued = 0
        for server_round in self.backlog.rounds():
            if server_round > last_round:  # not committed: the round itself runs again
                self.backlog.discard(server_round)
                continue
            done = recorded_attacks(rows, server_round, self.config.attacks)
            queued += self._submit(server_round, self.backlog.load(server_round), done)
        return queued

    def _submit(self, server_round: int, updates: list[TappedUpdate], done: set[tuple[int, str]]) -> int:
        with self._lock:
            served = self._round_models.pop(server_round, None)
        architecture = self.architecture if served is None else replace(self.architecture, model=served)
        views = build_views(updates, self.config, architecture, self.training, self.grant_labels, self.aggregate_noise)
        # One job per attack and group of compatible views (run_attack batches a group and its restarts
        # itself): per-client targets and the aggregate are different problems, so they run side by side.
        jobs: list[tuple[int, AttackOptions, list[AttackerView]]] = []
        for index, options in enumerate(self.config.attacks):
            todo = [view for view in views if options.applies_to(view.target) and (index, view.target) not in done]
            jobs.extend((index, options, [todo[i] for i in group]) for group in group_views(todo))
        budget = saturation_budget(self.config)
        if budget is not None:
            return self._submit_portfolios(server_round, jobs, budget)
        if not jobs:
            self._round_done(server_round)
            return 0
        with self._lock:
            self._open_jobs[server_round] = len(jobs)
        spare = max(1, self.config.workers // len(jobs))  # workers per job: an attack's restarts can share them
        for index, options, todo in jobs:
            seed = derive_seed(self.seed, "attack", server_round, index)
            try:
                tuning = self._tuning(options, todo)
                # a tuned attack tunes once, in one worker; an untuned one's restarts go to the workers left idle
                shares = restart_shares(options, spare) if tuning is None else [options]
                parts = [self.workers.submit(AttackJob(share, todo, seed, tuning=tuning)) for share in shares]
                job = parts[0] if len(parts) == 1 else best_of(parts)
            except Exception as error:  # e.g. a broken worker pool: the job fails, the run goes on
                job = Future()
                job.set_exception(error)
            with self._lock:
                self._jobs.append(job)
            # analytic attacks (dager, rtf, ...) take no time limit: they end when their algebra does
            time_limit = getattr(options, "time_limit", None)
            self.progress.note(job, f"{options.label} on round {server_round} ({len(todo)} target(s))", time_limit)
            job.add_done_callback(
                functools.partial(
                    self._queue_report, server_round=server_round, attacks=[options], views=todo, portfolio=False
                )
            )
        return len(jobs)

    def _submit_portfolios(
        self, server_round: int, jobs: list[tuple[int, AttackOptions, list[AttackerView]]], budget: SaturationBudget
    ) -> int:
        """The race and the saturation step need every attack's results on a target before they pick its leaders: the
        attacks of one group of views go out as one ``PortfolioJob``, or, with several workers, as one per share of
        its targets (``split_targets``), so that every worker has a part of a round's portfolio to run."""
        portfolios: dict[tuple[int, ...], list[tuple[int, AttackOptions, list[AttackerView]]]] = defaultdict(list)
        for index, options, todo in jobs:
            portfolios[tuple(id(view) for view in todo)].append((index, options, todo))
        if not portfolios:
            self._round_done(server_round)
            return 0
        shares = [
            (members, share)
            for members in portfolios.values()
            for share in split_targets(members[0][2], self.config.workers)
        ]
        with self._lock:
            self._open_jobs[server_round] = len(shares)
        tunings: dict[int, dict[int, Any]] = {}
        for members, views in shares:
            attacks = [
                (options, derive_seed(self.seed, "attack", server_round, index)) for index, options, _ in members
            ]
            group = members[0][2]  # a group's attacks are tuned once, on the whole group, whichever share runs
            if id(group) not in tunings:
                tunings[id(group)] = {
                    i: task for i, (options, _) in enumerate(attacks) if (task := self._tuning(options, group))
                }
            try:
                job = self.workers.submit(PortfolioJob(attacks, views, budget, tunings[id(group)]))
            except Exception as error:
                job = Future()
                job.set_exception(error)
            with self._lock:
                self._jobs.append(job)
            chosen = [options for _, options, _ in members]
            label = f"portfolio of {len(chosen)} attack(s) on round {server_round} ({len(views)} target(s))"
            self.progress.note(job, label, budget.max_seconds)
            job.add_done_callback(
                functools.partial(
                    self._queue_report, server_round=server_round, attacks=chosen, views=views, portfolio=True
                )
            )
        return len(shares)

    def _tuning(self, options: AttackOptions, views: list[AttackerView]) -> Any:
        if self.tuner is None:
            return None
        try:
            return self.tuner(options, views)
        except Exception as error:  # tuning improves an attack; the attack still runs without it
            logger.warning("tuning %s: could not rehearse the round on public images (%s)", options.label, error)
            return None

    def _queue_report(
        self, job: Future, server_round: int, attacks: list[AttackOptions], views: list[AttackerView], portfolio: bool
    ) -> None:
        """Score ``job``'s reconstructions in the scoring thread; a ``portfolio`` job holds one outcome per attack."""
        with self._reported:
            if self._abandoned:
                return
            self._reports.append(self._scoring.submit(self._report, job, server_round, attacks, views, portfolio))
            self._reported.notify_all()

    def _report(
        self, job: Future, server_round: int, attacks: list[AttackOptions], views: list[AttackerView], portfolio: bool
    ) -> None:
        error = job.exception()
        if error is not None:
            outcomes: list = [error] * len(attacks)
        else:
            outcomes = job.result() if portfolio else [job.result()]
        for options, outcome in zip(attacks, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # one failed attack must not end the run or the other attacks
                logger.error("attack %s on round %d failed: %s", options.label, server_round, outcome, exc_info=outcome)
                for view in views:
                    self.on_failure(view, options, outcome)
            else:
                for view, reconstruction in zip(views, outcome, strict=True):
                    self.on_result(view, options, reconstruction)
        with self._lock:
            self._open_jobs[server_round] -= 1
            finished = self._open_jobs[server_round] == 0
        if finished:
            self._round_done(server_round)

    def _round_done(self, server_round: int) -> None:
        with self._lock:
            self._open_jobs.pop(server_round, None)
        if self.backlog is not None:
            self.backlog.discard(server_round)

    def pending(self) -> int:
        return sum(not job.done() for job in self._jobs)

    def finish(self, stop: StopSignal | None = None) -> bool:
        """Wait for every queued attack (stragglers included) and its scoring, then release the workers.

        Returns False, leaving the workers to ``abandon``, when ``stop`` is requested before they are all done."""
        if self.pending():
            logger.info("waiting for %d attack(s) still running", self.pending())
        with self._lock:
            jobs = list(self._jobs)
        with self._reported:  # a job's waiters wake before its done-callbacks have queued the report
            while not self._reported.wait_for(lambda: len(self._reports) >= len(jobs), timeout=_STOP_POLL_S):
                if stop is not None and stop.requested:
                    return False
                if self.progress.due():
                    logger.info("attacks: %s", self.progress.line())
            reports = list(self._reports)
        try:
            for report in reports:
                report.result()  # a scoring error surfaces here, as it did from the attack threads
        finally:
            self._scoring.shutdown(wait=True)
            self.workers.shutdown()
        return True

    def abandon(self) -> None:
        """Stop now: unfinished attacks are dropped unrecorded (their rounds stay in the backlog, so a resumed run
        attacks them again), the scoring under way finishes, and the worker processes are terminated."""
        with self._reported:
            self._abandoned = True  # the failures of killed jobs are no attack failures: record none of them
        self._scoring.shutdown(wait=True, cancel_futures=True)
        self.workers.terminate()
