"""Before the audit's run: the DP the app's nodes train with, found by a dry call of its first round, so that the
attacks are chosen knowing it (Opacus' PrivacyEngine is set up inside a node's training, where nothing before the
run can read it).

The app's own ServerApp is called once, in this process, on a grid of this module's (``DryGrid``): what comes before
training (a legacy workflow asking a client for the initial model, an evaluation) is answered by calling the ClientApp
here; each node's first train message is handed to the ClientApp of that node with its DP noted
(``client_probe.first_training``: Opacus' ``make_private`` notes its settings, and the call ends at the first batch its
data loader draws, before any step trains); then the ServerApp is stopped. Nothing of it reaches the run: the random
states of torch, NumPy and ``random`` are restored, the app works in a temporary folder, Flower's log is held back,
and no row is written; the audited run starts the app afresh, each node in its own process.
"""

from __future__ import annotations

import contextlib
import logging
import random
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Error, Message, MessageType, RecordDict
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from fedsim.core.errors import first_line
from fedsim.core.flower_private import give_message_id, server_app_has_main, task_identity
from fedsim.engine.app_audit.client_probe import first_training
from fedsim.engine.app_audit.dp import strategy_found
from fedsim.engine.app_audit.grid import single_arrays
from fedsim.engine.app_audit.server_watch import watching_strategies

logger = logging.getLogger("fedsim")

DRY_RUN_ID = 1
FIRST_NODE = 1  # the dry grid's node ids: FIRST_NODE + partition


class DryRunOver(BaseException):
    """The dry call saw what it was for (or cannot see more): the ServerApp is stopped. A BaseException, so that an
    app catching its own errors does not catch it."""


@dataclass
class DryProbe:
    """What a dry call of the app's first round found: per partition, its DP findings (``client_probe`` notes); the
    DP strategy wrappers its server started; why it ended without reaching every node's training (None: it did)."""

    findings: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    strategies: list[dict[str, Any]] = field(default_factory=list)
    unfinished: str | None = None


class DryGrid(Grid):
    """A grid of ``num_nodes`` nodes answered by ``client_app`` in this process, up to the first train messages."""

    def __init__(self, client_app: Any, num_nodes: int, run_config: dict[str, Any], probe: DryProbe) -> None:
        self._client_app = client_app
        self._num_nodes = num_nodes
        self._run_config = dict(run_config)
        self._probe = probe
        self._replies: dict[str, Message] = {}
        self._over = False
        self._lock = threading.Lock()

    def set_run(self, run: Any) -> None:
        pass

    @property
    def run(self) -> Any:  # the legacy API's client proxies read its id
        return SimpleNamespace(run_id=DRY_RUN_ID)

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return [FIRST_NODE + p for p in range(self._num_nodes)]

    def context(self, node_id: int) -> Context:
        """The node's context as Flower's simulation gives it: its partition and the number of partitions."""
        node_config: dict[str, bool | float | int | str] = {
            wire.PARTITION_ID: node_id - FIRST_NODE,
            wire.NUM_PARTITIONS: self._num_nodes,
        }
        return Context(DRY_RUN_ID, node_id, node_config, RecordDict(), dict(self._run_config))

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = [str(uuid.uuid4()) for _ in messages]
        for message, message_id in zip(messages, ids, strict=True):
            give_message_id(message, message_id)
        with self._lock:
            if self._over:  # nothing more is answered
                raise DryRunOver
        trains = [m for m in messages if m.metadata.message_type == MessageType.TRAIN]
        for message, message_id in zip(messages, ids, strict=True):
            if message.metadata.message_type != MessageType.TRAIN:
                self._replies[message_id] = self._answer(message)
        if trains:
            self._first_training(trains)
        return ids

    def _answer(self, message: Message) -> Message:
        try:
            return self._client_app(message=message, context=self.context(message.metadata.dst_node_id))
        except Exception as error:  # what Flower's simulation does with a ClientApp that raises
            return Message(Error(code=0, reason=repr(error)), reply_to=message)

    def _first_training(self, trains: list[Message]) -> None:
        with self._lock:
            self._over = True
        for message in trains:
            node = message.metadata.dst_node_id
            if single_arrays(message) is None:  # SecAgg+'s setup stage: training comes after the key exchange
                self._probe.unfinished = "its first train messages carry no model (a secure aggregation protocol)"
                raise DryRunOver
            try:
                self._probe.findings[node - FIRST_NODE] = first_training(self._client_app, message, self.context(node))
            except Exception as error:
                self._probe.unfinished = (
                    f"node {node - FIRST_NODE}'s training failed: {type(error).__name__}: {first_line(error)}"
                )
                raise DryRunOver from error
        raise DryRunOver

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def dry_probe(server_app: Any, client_app: Any, num_nodes: int, run_config: dict[str, Any]) -> DryProbe:
    """The DP the app's first round sets up on each node, found by a dry call (see the module docstring)."""
    probe = DryProbe()
    if not server_app_has_main(server_app):  # its rounds go on in their threads whatever a grid raises
        probe.unfinished = "its ServerApp runs Flower's legacy server loop (server_fn), which no dry call can stop"
        return probe
    grid = DryGrid(client_app, num_nodes, run_config, probe)
    context = Context(DRY_RUN_ID, 0, {}, RecordDict(), dict(run_config))

    def started(strategy: Any) -> None:
        finding = strategy_found(strategy)
        if finding is not None:
            probe.strategies.append(finding)

    with (
        _untouched_state(),
        task_identity(DRY_RUN_ID),
        watching_strategies(lambda server_round, kind, metrics: None, started),
    ):
        try:
            server_app(grid=grid, context=context)
        except DryRunOver:
            pass
        except Exception as error:
            probe.unfinished = (
                f"the app's server failed before its first training: {type(error).__name__}: {first_line(error)}"
            )
    if not probe.findings and probe.unfinished is None:
        probe.unfinished = "the app's server sent no train message"
    return probe


@contextlib.contextmanager
def _untouched_state() -> Iterator[None]:
    """The random states, the working directory and Flower's log as they were before the body ran."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    flower = logging.getLogger("flwr")
    level = flower.level
    flower.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="fedsim-dry-") as folder, contextlib.chdir(folder):
            yield
    finally:
        flower.setLevel(level)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
