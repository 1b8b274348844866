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
from typing import TYPE_CHECKING

from fedsim.core.wire import SECAGG_TRAINING_STAGE

if TYPE_CHECKING:  # type hints only: plugins never import the config that composes them
    from fedsim.config import ExperimentConfig

# A silent client wakes up this long after the server stopped waiting for it, and its late reply is dropped.
HANG_GRACE_S = 2.0


class InjectedFailure(RuntimeError):
    """A failure the config asked for (federation.failures)."""


def _training_stage(config: ExperimentConfig) -> str | None:
    return SECAGG_TRAINING_STAGE if config.strategy.secagg is not None else None


def injected_kind(config: ExperimentConfig, server_round: int, partition: int, stage: str | None) -> str | None:
    """The kind of failure scheduled for this client in this round and stage, if any."""
    default_stage = _training_stage(config)
    for failure in config.federation.failures:
        if failure.round == server_round and failure.client == partition and (failure.stage or default_stage) == stage:
            return failure.kind
    return None


def fail(kind: str, config: ExperimentConfig, server_round: int, partition: int, stage: str | None) -> None:
    """Crash (``exception``) or fall silent (``hang``); ``nan`` is the caller's, as it acts on the data."""
    where = f"round {server_round}" + (f", stage {stage}" if stage else "")
    if kind == "hang":
        time.sleep(config.federation.round_timeout + HANG_GRACE_S)
        raise InjectedFailure(f"client {partition} was told to stop answering in {where}")
    if kind == "exception":
        raise InjectedFailure(f"client {partition} was told to fail in {where}")


# Set while a handler runs under an injected `nan` failure; training reads it (module-level: Ray pickles it by reference).
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
