"""The adversary of a run: collects what its tap saw, and attacks it beside the training.

Taps hand over ``TappedUpdate`` records as messages flow; when the server closes a round, the
round's views are built and submitted as attack jobs to a worker pool, so training never waits
for an attack. Finished reconstructions go to ``on_result`` (the scoring side, outside the
adversary) as they complete; ``finish`` waits for the stragglers at the end of the run.

With a backlog, a round's tapped updates stay on disk until all its jobs have reported, and ``resume``
re-attacks what a killed run left unfinished.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from adversary.attacks import resolve_options, run_attack
from adversary.attacks.problem import group_views
from adversary.taps import TappedUpdate
from adversary.threat_models import Architecture, LabelGrant, TrainingHyperparameters, build_views
from adversary.view import AttackerView, Reconstruction
from fedsim.config import AdversaryConfig, AttackOptions
from fedsim.seeding import derive_seed

logger = logging.getLogger("fedsim")

ResultSink = Callable[[AttackerView, AttackOptions, Reconstruction], None]
FailureSink = Callable[[AttackerView, AttackOptions, BaseException], None]


class Backlog(Protocol):
    """Where a round's tapped updates wait until its attacks are done (fedsim.attack_backlog)."""

    def save(self, server_round: int, updates: list[TappedUpdate]) -> None: ...
    def load(self, server_round: int) -> list[TappedUpdate]: ...
    def rounds(self) -> list[int]: ...
    def discard(self, server_round: int) -> None: ...


def recorded_attacks(rows: Sequence[dict[str, Any]], server_round: int, attacks: Sequence[AttackOptions]) -> set[tuple[int, str]]:
    """(attack index, target) pairs of ``attacks`` that already have a row for ``server_round``.

    Rows name the attack, not its position in the config: the j-th attack of a name counts as done for a
    target once j rows of that name and target exist (counting only the attacks that run on that target).
    """
    counts = Counter(
        (row["attack"], row["target"]) for row in rows if row.get("event") == "attack" and row.get("round") == server_round
    )
    done = set()
    for (name, target), count in counts.items():
        runs_on_target = [i for i, options in enumerate(attacks) if options.name == name and options.applies_to(target)]
        done |= {(index, target) for index in runs_on_target[:count]}
    return done


def share_cpu_threads(workers: int) -> int:
    """Give each of ``workers`` concurrent CPU attacks its share of torch's intra-op threads; returns the share.

    An attack is a long chain of small kernels: workers that each spread every kernel over all cores mostly
    wait on each other (bench/attacks.py: per-client and aggregate side by side on 2 cores take 60 s with
    2 threads each, 46 s with 1). The setting is process-wide, so it also applies to the server's evaluation.
    """
    share = max(1, torch.get_num_threads() // workers)
    if share != torch.get_num_threads():
        logger.info("attack workers: %d on CPU, torch intra-op threads %d -> %d", workers, torch.get_num_threads(), share)
        torch.set_num_threads(share)
    return share


class Adversary:
    def __init__(
        self,
        config: AdversaryConfig,
        architecture: Architecture,
        training: TrainingHyperparameters,
        seed: int,
        device: torch.device,
        on_result: ResultSink,
        on_failure: FailureSink,
        grant_labels: LabelGrant | None = None,
        backlog: Backlog | None = None,
    ) -> None:
        self.config = config
        self.architecture = architecture
        self.training = training
        self.seed = seed
        self.device = device
        self.on_result = on_result
        self.on_failure = on_failure
        self.grant_labels = grant_labels
        self.backlog = backlog
        self._open_jobs: dict[int, int] = {}  # round -> attack jobs not yet reported
        self._updates: dict[int, list[TappedUpdate]] = defaultdict(list)
        self._lock = threading.Lock()
        if device.type == "cpu" and config.workers > 1:
            share_cpu_threads(config.workers)
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="fedsim-attack")
        self._jobs: list[Future] = []

    def observe(self, update: TappedUpdate) -> None:
        """Sink for the tap: keep what the configured tap saw in the rounds under attack."""
        if update.tap == self.config.tap and self.config.attacks_round(update.round):
            with self._lock:
                self._updates[update.round].append(update)

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
        views = build_views(updates, self.config, self.architecture, self.training, self.grant_labels)
        # One job per attack and group of compatible views (run_attack batches a group and its restarts
        # itself): per-client targets and the aggregate are different problems, so they run side by side.
        jobs = []
        for index, options in enumerate(self.config.attacks):
            todo = [view for view in views if options.applies_to(view.target) and (index, view.target) not in done]
            jobs.extend((index, options, [todo[i] for i in group]) for group in group_views(todo))
        if not jobs:
            self._round_done(server_round)
            return 0
        with self._lock:
            self._open_jobs[server_round] = len(jobs)
        for index, options, todo in jobs:
            seed = derive_seed(self.seed, "attack", server_round, index)
            self._jobs.append(self._pool.submit(self._attack, server_round, resolve_options(options), todo, seed))
        return len(jobs)

    def _attack(self, server_round: int, options: AttackOptions, views: list[AttackerView], seed: int) -> None:
        try:
            reconstructions = run_attack(options, views, seed, self.device)
        except Exception as error:  # one failed attack must not end the run or the other attacks
            logger.exception("attack %s on round %d failed", options.name, server_round)
            for view in views:
                self.on_failure(view, options, error)
        else:
            for view, reconstruction in zip(views, reconstructions):
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

    def finish(self) -> None:
        """Wait for every queued attack (stragglers included), then release the workers."""
        for job in self._jobs:
            job.result()
        self._pool.shutdown(wait=True)
