"""What the tapped grid of an audited app reports, written to the app audit's run session.

The app's rounds are the app's own (its ServerApp drives them), so the grid (``fedsim.engine.app_audit.grid``) reports
them as they happen: which samples each update trained on (the ground truth the scorer reads), each client's
reply (its `fit` or `evaluate` row), and each round's end, committed through the session as a run commits its rounds
(``fedsim.engine.session.RunSession.commit_round``): the `eval` row, the round hooks, the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from adversary.taps import ClientReport, RoundFilter
from fedsim.core.stopping import StopSignal
from fedsim.engine.app_audit.dp_watch import DpWatch
from fedsim.engine.app_audit.grid import AppGrid
from fedsim.engine.app_audit.metrics import AppMetrics
from fedsim.engine.lifecycle.evaluation import CentralEvaluator
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.rounds import StoppableGrid
from fedsim.engine.session import RunSession
from fedsim.rundir.ground_truth import GroundTruthStore


class AppRecording:
    """The callbacks of an audited app's tapped grid, writing to ``session``.

    ``evaluator``: fedsim's own scores of each released model (None: the audit config names no held-out data);
    ``dp_watch``: what the app's clients drew per local step and its DP mods' settings."""

    def __init__(
        self,
        session: RunSession,
        federation: Federation,
        evaluator: CentralEvaluator | None,
        dp_watch: DpWatch,
    ) -> None:
        self.session = session
        self.federation = federation
        self.evaluator = evaluator
        self.dp_watch = dp_watch
        self.truth = GroundTruthStore(session.run_dir)
        self.ground_truth: dict[tuple[int, int], str] = {}  # how each update's ground truth was known
        self.app_metrics = AppMetrics()
        self.node_partitions: dict[int, int] = {}  # node id -> partition id, as the nodes register

    def trained_on(self, server_round: int, report: ClientReport) -> None:
        ids = self.federation.partitions[report.client]
        steps = self.dp_watch.notes.steps(server_round, report.client, len(ids))  # what each local step drew
        batches = [ids[step] for step in steps] if steps is not None else [ids]  # else: the whole split
        labels = self.federation.dataset.y_train
        self.truth.write(
            server_round, report.client, [b.tolist() for b in batches], [labels[b].tolist() for b in batches]
        )
        self.ground_truth[(server_round, report.client)] = "steps" if steps is not None else "partition"

    def replied(self, server_round: int, event: str, client: int, metrics: dict[str, Any]) -> None:
        known = {"ground_truth": self.ground_truth[(server_round, client)]} if event == "fit" else {}
        row = {"round": server_round, "event": event, "client": client, "status": "ok", **metrics, **known}
        self.session.record(row)

    def round_done(self, server_round: int, state: dict[str, torch.Tensor] | None) -> None:
        for earlier, fields in self.app_metrics.before(server_round):  # e.g. the app's evaluation of round 0
            self.session.record({"round": earlier, "event": "eval", **fields})
        own = self.app_metrics.of(server_round)
        row = None
        if state is not None or own:
            scores = self.evaluator(state) if self.evaluator is not None and state is not None else {}
            row = {**scores, **own}
        hooks = (lambda _: self.dp_watch.round_done(), *self.session.round_hooks)
        self.session.commit_round(server_round, row, state, hooks)

    def tapped(
        self,
        stop: StopSignal,
        *,
        tap: str,
        wants: RoundFilter,
        layout: Mapping[str, tuple[int, ...]],
    ) -> Callable[[Any], AppGrid]:
        """What wraps the app's grid: the stop innermost (it reaches the app's server wherever it waits on the
        grid), then the adversary's tap and these callbacks."""
        wiring = self.session.adversary
        observe = wiring.adversary.observe if wiring is not None else (lambda update: None)

        def wrap(grid: Any) -> AppGrid:
            return AppGrid(
                StoppableGrid(grid, stop),
                observe,
                tap=tap,
                wants=wants,
                partition_of=self.node_partitions.__getitem__,
                layout=layout,
                trained_on=self.trained_on,
                round_done=self.round_done,
                replied=self.replied,
                audit=self.dp_watch.privacy_audit.observe if self.dp_watch.privacy_audit is not None else None,
            )

        return wrap
