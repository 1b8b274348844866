"""Failures the config injects into clients (``federation.failures``): a crash, a NaN loss, or silence.

A failure fires in a round, for one client, in one stage: the Message-API clients have a single one
(training, ``stage: null``); SecAgg+ clients have the protocol's four, and ``stage: null`` there means
the stage in which they train (``collect_masked_vectors``). Every failure goes through the client's
real error path, so what the server records is what a real crash or drop-out would produce.
"""

from __future__ import annotations

import time

from fedsim.config import SECAGG_TRAINING_STAGE, ExperimentConfig

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
