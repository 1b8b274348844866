"""Client-side concerns as Flower mods, the same on both client paths (Message-API ClientApp and legacy SecAgg+).

A mod wraps a ClientApp's handler (``flwr.clientapp.typing.Mod``: message, context, call_next),
the way Flower's own ``fixedclipping_mod`` and ``secaggplus_mod`` do:

* ``error_reply_mod``: any exception in what it wraps (training, evaluation, Flower's protocol
  checks) becomes a failed reply with a one-line reason, and its traceback goes to the run's client
  log, so that a failing client never takes the federation down;
* ``injected_failure_mod``: the failures of ``federation.failures`` fire in their round and stage
  (``clients.failures``): a crash, silence past the timeout, or training on NaN inputs.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from flwr.app import Context, Error, Message, MessageType
from flwr.clientapp.typing import ClientAppCallable, Mod

import fedsim.core.wire as wire
from clients.failures import FailureSchedule, fail, injected_kind, poisoned_data
from clients.training import NonFiniteLossError
from fedsim.core.atomic import OutsideDirectory, inside
from fedsim.rundir.layout import CLIENT_ERROR_LOG

# Error codes carried in failed replies (Flower's Error.code is a free integer).
CLIENT_EXCEPTION = 1001
CLIENT_NON_FINITE_LOSS = 1002


def partition_of(context: Context) -> int:
    """The partition a simulated node holds (its node config)."""
    return int(context.node_config[wire.PARTITION_ID])


def where(message: Message, context: Context) -> str:
    """Round, client and step of a message, for the client log."""
    server_round = wire.server_round_of(message)
    step = wire.stage_of(message) or message.metadata.message_type
    return ", ".join(
        part
        for part in (
            f"round {server_round}" if server_round is not None else "",
            f"client {partition_of(context)}",
            step,
        )
        if part
    )


def failure_reply(run_dir: Path, message: Message, error: BaseException, location: str) -> Message:
    """An error reply with a one-line reason; the full traceback goes to the run's client log (any protocol).

    A client log that is a symlink leading outside the run directory is not written: the reply's reason says
    so after the client's own error, which still reaches the server's row."""
    reason = f"{type(error).__name__}: {error}"
    try:
        log_path = inside(run_dir, run_dir / CLIENT_ERROR_LOG)
    except OutsideDirectory as refused:
        reason = f"{reason} (traceback not logged: {refused})"
    else:
        with open(log_path, "a") as log:
            log.write(f"--- {location}\n")
            log.write(traceback.format_exc())
    code = CLIENT_NON_FINITE_LOSS if isinstance(error, NonFiniteLossError) else CLIENT_EXCEPTION
    return Message(Error(code=code, reason=reason), reply_to=message)


def error_reply_mod(run_dir: Path) -> Mod:
    """A mod turning an exception below it into a failed reply (traceback to ``run_dir``/client_errors.log)."""

    def mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
        location = where(message, context)  # read first: secaggplus_mod consumes the stage
        try:
            return call_next(message, context)
        except Exception as error:  # a failing client must not take the federation down
            return failure_reply(run_dir, message, error, location)

    return mod


def injected_failure_mod(schedule: FailureSchedule) -> Mod:
    """A mod firing the failures ``schedule`` holds for this client, round and protocol stage."""

    def mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
        server_round = wire.server_round_of(message)
        if message.metadata.message_type != MessageType.TRAIN or server_round is None:
            return call_next(message, context)
        partition, stage = partition_of(context), wire.stage_of(message)
        kind = injected_kind(schedule, server_round, partition, stage)
        if kind == "nan":  # the loss must really become NaN: training runs on NaN inputs
            with poisoned_data():
                return call_next(message, context)
        if kind is not None:
            fail(kind, schedule.round_timeout, server_round, partition, stage)
        return call_next(message, context)

    return mod


def failure_mods(schedule: FailureSchedule, run_dir: Path) -> list[Mod]:
    """The mods every client app starts with, outermost first: error capture around injected failures."""
    return [error_reply_mod(run_dir), injected_failure_mod(schedule)]
