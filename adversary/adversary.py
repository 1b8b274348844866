"""The adversary of a run: collects what its tap saw, and attacks it beside the training.

Taps hand over ``TappedUpdate`` records as messages flow; when the server closes a round, the
round's views are built and submitted as attack jobs to a worker pool, so training never waits
for an attack. Finished reconstructions go to ``on_result`` (the scoring side, outside the
adversary) as they complete; ``finish`` waits for the stragglers at the end of the run.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from adversary.attacks import resolve_options, run_attack
from adversary.threat_models import Architecture, LabelGrant, TrainingHyperparameters, build_views
from adversary.view import AttackerView, Reconstruction
from fedsim.config import AdversaryConfig, AttackOptions
from fedsim.seeding import derive_seed
from strategies.taps import TappedUpdate

logger = logging.getLogger("fedsim")

ResultSink = Callable[[AttackerView, AttackOptions, Reconstruction], None]
FailureSink = Callable[[AttackerView, AttackOptions, BaseException], None]


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
    ) -> None:
        self.config = config
        self.architecture = architecture
        self.training = training
        self.seed = seed
        self.device = device
        self.on_result = on_result
        self.on_failure = on_failure
        self.grant_labels = grant_labels
        self._updates: dict[int, list[TappedUpdate]] = defaultdict(list)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="fedsim-attack")
        self._jobs: list[Future] = []

    def observe(self, update: TappedUpdate) -> None:
        """Sink for the tap: keep what the configured tap saw in the rounds under attack."""
        if update.tap == self.config.tap and self.config.attacks_round(update.round):
            with self._lock:
                self._updates[update.round].append(update)

    def round_finished(self, server_round: int) -> int:
        """Submit the round's attacks; returns how many attack jobs were queued."""
        with self._lock:
            updates = self._updates.pop(server_round, [])
        if not updates:
            return 0
        views = build_views(updates, self.config, self.architecture, self.training, self.grant_labels)
        if not views:
            return 0
        # One job per attack: run_attack batches the round's compatible views (and restarts) itself.
        for index, options in enumerate(self.config.attacks):
            seed = derive_seed(self.seed, "attack", server_round, index)
            self._jobs.append(self._pool.submit(self._attack, resolve_options(options), views, seed))
        return len(self.config.attacks)

    def _attack(self, options: AttackOptions, views: list[AttackerView], seed: int) -> None:
        try:
            reconstructions = run_attack(options, views, seed, self.device)
        except Exception as error:  # one failed attack must not end the run or the other attacks
            logger.exception("attack %s on round %d failed", options.name, views[0].round)
            for view in views:
                self.on_failure(view, options, error)
            return
        for view, reconstruction in zip(views, reconstructions):
            self.on_result(view, options, reconstruction)

    def pending(self) -> int:
        return sum(not job.done() for job in self._jobs)

    def finish(self) -> None:
        """Wait for every queued attack (stragglers included), then release the workers."""
        for job in self._jobs:
            job.result()
        self._pool.shutdown(wait=True)
