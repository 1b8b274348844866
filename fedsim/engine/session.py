"""One run directory from its opening to its summary: the skeleton ``fedsim run`` and ``fedsim audit`` share.

A ``RunSession`` opens the run's store (a new directory, or a killed run's to resume), records who holds which
samples, attaches the adversary and the privacy audit, commits each round (its `eval` row, the round hooks, the
checkpoint: ``fedsim.engine.lifecycle.rounds.record_round``, the code the round driver commits with), lets the
attacks under way finish or abandons them, and writes the summary. Used as a context manager it holds the run
directory's lock; a new run that ends before committing a round gives its directory back (fedsim's own files
removed, never the user's), so that the same ``output.run_name`` can start again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig, FederationConfig
from fedsim.core.stopping import StopSignal
from fedsim.engine.leakage.wiring import AdversaryWiring
from fedsim.engine.lifecycle.federation import Federation, partition_record
from fedsim.engine.lifecycle.rounds import State, record_round
from fedsim.engine.lifecycle.summary import summarize
from fedsim.engine.privacy_audit import PrivacyAuditWiring
from fedsim.rundir.layout import PARTITIONS_FILE, SUMMARY_FILE
from fedsim.rundir.writer import RunStore

RoundHook = Callable[[int], object]


class RunSession:
    """One run's store and what is attached to it, from opening to summary (see the module's docstring).

    ``new_run``: the directory was created by this session (else reopened to resume); ``started``: when the
    session's work began (``time.perf_counter``), for the summary's wall time; ``keep_checkpoints``: every round's
    checkpoint stays (False: the last two, ``output.save_checkpoints``)."""

    def __init__(self, store: RunStore, *, new_run: bool, started: float, keep_checkpoints: bool = True) -> None:
        self.store = store
        self.new_run = new_run
        self.started = started
        self.keep_checkpoints = keep_checkpoints
        self.adversary: AdversaryWiring | None = None
        self.privacy_audit: PrivacyAuditWiring | None = None
        self._given_back = False

    @classmethod
    def create(cls, store: RunStore, *, started: float, keep_checkpoints: bool) -> RunSession:
        """A session on a new run directory (``RunStore.create``: claimed atomically, its config written, locked),
        given back if it ends before its first commit."""
        return cls(store, new_run=True, started=started, keep_checkpoints=keep_checkpoints)

    @classmethod
    def resume(cls, run_dir: Path, rounds: int | None, *, started: float) -> tuple[RunSession, ExperimentConfig, int]:
        """A killed or finished run's directory reopened (``RunStore.open_for_resume``), with its config and its
        last committed round."""
        store, config, last_round = RunStore.open_for_resume(run_dir, rounds)
        session = cls(store, new_run=False, started=started, keep_checkpoints=config.output.save_checkpoints)
        return session, config, last_round

    def __enter__(self) -> RunSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        try:
            if kind is not None:  # before the store is closed: a failed start leaves nothing that blocks a retry
                self.give_back_uncommitted()
        finally:
            self.store.close()

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir

    def give_back_uncommitted(self) -> Path | None:
        """A new run that committed no round (refused, stopped, crashed) has nothing to resume: its directory is
        given back (``RunStore.discard``). Returns the directory that stays, or None when none does."""
        if self.new_run and not self._given_back and self.store.last_committed_round() is None:
            self._given_back = True
            self.store.discard()
        if self._given_back:
            return self.store.run_dir if self.store.run_dir.exists() else None
        return self.store.run_dir

    def record_resumption(self, device: str, environment: dict[str, Any]) -> None:
        self.store.record_resumption(device, environment)

    def record_partitions(self, federation: Federation) -> None:
        """Who holds which samples and how they normalise (scoring side only, never the attacker)."""
        self.store.write_json(PARTITIONS_FILE, partition_record(federation))

    def record(self, row: dict[str, Any]) -> None:
        """One row of the run's metrics, written at once."""
        self.store.append(row)

    def attach_adversary(self, wiring: AdversaryWiring) -> AdversaryWiring:
        """The run's adversary (``fedsim.engine.assembly.adversary_of``): its taps join the server's grid or
        strategy, its attacks run as rounds end, and ``end_attacks`` lets them finish."""
        self.adversary = wiring
        return wiring

    def attach_privacy_audit(self, wiring: PrivacyAuditWiring) -> PrivacyAuditWiring:
        """The privacy audit (``fedsim.engine.privacy_audit``): its canary clients and taps join the server's, its
        scores are saved with each round, its bound is recorded by ``summarise``."""
        self.privacy_audit = wiring
        return wiring

    def wrap_strategy(self, strategy: Any) -> Any:
        """The server's strategy with the audit's canary clients and taps, under the adversary's own wrapping."""
        if self.privacy_audit is not None:
            strategy = self.privacy_audit.wrap_strategy(strategy)
        return self.adversary.wrap_strategy(strategy) if self.adversary is not None else strategy

    @property
    def wrap_grid(self) -> Callable[[Any], Any] | None:
        """The wire taps of the adversary and of the audit, on the server's grid (None: neither taps the wire)."""
        return chained(
            self.adversary.wrap_grid if self.adversary is not None else None,
            self.privacy_audit.wrap_grid if self.privacy_audit is not None else None,
        )

    @property
    def round_hooks(self) -> tuple[RoundHook, ...]:
        """What runs as a round ends, before its commit: the adversary's attacks, the audit's scores."""
        return ((self.adversary.adversary.round_finished,) if self.adversary is not None else ()) + (
            (self.privacy_audit.round_finished,) if self.privacy_audit is not None else ()
        )

    def commit_round(
        self,
        server_round: int,
        fields: Mapping[str, Any] | None,
        state: State | None,
        hooks: Iterable[RoundHook] | None = None,
    ) -> None:
        """The round's `eval` row, its hooks (by default ``round_hooks``) and its checkpoint, as the round driver
        commits them (``record_round``)."""
        hooks = self.round_hooks if hooks is None else hooks
        record_round(self.store, server_round, fields, state, hooks, self.keep_checkpoints)

    def end_attacks(self, stop: StopSignal, *, completed: bool) -> None:
        """Every reconstruction under way scored and recorded when the rounds ``completed``, unless a stop comes
        first: then (or after a failure) the unfinished attacks are abandoned and stay in the backlog."""
        wiring = self.adversary
        if wiring is not None and not (completed and wiring.adversary.finish(stop)):
            wiring.adversary.abandon()

    def summarise(
        self,
        federation: FederationConfig | None = None,
        last_attacked_round: int = 0,
        extra: Mapping[str, Any] = {},
    ) -> dict[str, Any]:
        """Finish the privacy audit (its `audit` row), then write ``summary.json`` (``summarize``; ``federation``:
        with the run's utility, ``extra``: fields of the caller's) and return it."""
        if self.privacy_audit is not None:
            # the `audit` row (summarize reads it); a warning if the bound exceeds the accountant's epsilon
            self.privacy_audit.finish()
        elapsed = time.perf_counter() - self.started
        summary = {**summarize(self.store, elapsed, federation, last_attacked_round), **extra}
        self.store.write_json(SUMMARY_FILE, summary)
        return summary


def chained(*wrappers: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """One grid wrapper applying each of ``wrappers`` (None: none) in turn, innermost first."""
    present = [wrapper for wrapper in wrappers if wrapper is not None]
    if not present:
        return None

    def wrap(grid: Any) -> Any:
        for wrapper in present:
            grid = wrapper(grid)
        return grid

    return wrap
