"""Failures the config injects into clients (``federation.failures``): a crash, a NaN loss, or silence.

A failure fires in a round, for one client, in one stage: the Message-API clients have a single one
(training, ``stage: null``); SecAgg+ clients have the protocol's four, and ``stage: null`` there means
the stage in which they train (``collect_masked_vectors``). Every failure goes through the client's
real error path, so what the server records is what a real crash or drop-out would produce. The
failures fire from a client mod (``clients.mods.injected_failure_mod``) on both client paths; a ``nan``
failure poisons the data of the training it wraps (``poisoned_data``), so that the loss really is NaN.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

# A silent client wakes up this long after the server stopped waiting for it, and its late reply is dropped.
HANG_GRACE_S = 2.0


class InjectedFailure(RuntimeError):
    """A failure the config asked for (federation.failures)."""


class ScheduledFailure(Protocol):
    """One failure of ``federation.failures``, as far as a client reads it."""

    @property
    def round(self) -> int: ...
    @property
    def client(self) -> int: ...
    @property
    def kind(self) -> str:  # exception, nan or hang
        ...
    @property
    def stage(self) -> str | None:  # None: the stage the client trains in
        ...


@dataclass(frozen=True)
class FailureSchedule:
    """The failures to inject into clients, and what firing them needs to know of the run."""

    failures: tuple[ScheduledFailure, ...]
    round_timeout: float  # federation.round_timeout: a hanging client sleeps past it
    training_stage: str | None  # the protocol stage clients train in (SecAgg+'s collect_masked_vectors, else None)


def injected_kind(schedule: FailureSchedule, server_round: int, partition: int, stage: str | None) -> str | None:
    """The kind of failure scheduled for this client in this round and stage, if any."""
    for failure in schedule.failures:
        fires_in = failure.stage or schedule.training_stage
        if failure.round == server_round and failure.client == partition and fires_in == stage:
            return failure.kind
    return None


def fail(kind: str, round_timeout: float, server_round: int, partition: int, stage: str | None) -> None:
    """Crash (``exception``) or fall silent (``hang``, past ``round_timeout``); ``nan`` is the caller's, as it acts
    on the data."""
    where = f"round {server_round}" + (f", stage {stage}" if stage else "")
    if kind == "hang":
        time.sleep(round_timeout + HANG_GRACE_S)
        raise InjectedFailure(f"client {partition} was told to stop answering in {where}")
    if kind == "exception":
        raise InjectedFailure(f"client {partition} was told to fail in {where}")


# Set while a handler runs under an injected `nan` failure; training reads it
# (module-level: Ray pickles it by reference).
_POISONED: ContextVar[bool] = ContextVar("fedsim_poisoned_data", default=False)


@contextmanager
def poisoned_data() -> Iterator[None]:
    """Train on NaN inputs inside this block (an injected ``nan`` failure)."""
    token = _POISONED.set(True)
    try:
        yield
    finally:
        _POISONED.reset(token)


def data_poisoned() -> bool:
    return _POISONED.get()
