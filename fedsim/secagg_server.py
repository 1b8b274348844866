"""The ServerApp of SecAgg+ runs: fedsim's round loop around Flower's ``SecAggPlusWorkflow``.

Flower runs SecAgg+ as the fit step of its legacy ``DefaultWorkflow``, whose loop always starts at
round 1 and keeps no per-client record. This loop keeps Flower's pieces as they are (a
``LegacyContext`` holding the legacy strategy and a client manager of ``GridClientProxy`` nodes, and
``SecAggPlusWorkflow`` called once per round, exactly as ``DefaultWorkflow`` calls its fit workflow)
and adds what fedsim's Message-API loop does: the roll call, starting after round k (``--resume``),
a `fit` row per client saying who dropped out in which stage, the `eval` row and the checkpoint that
commits the round (``server_app.commit_round``), and live progress.

Who did what is read off the wire by ``ProtocolMonitor``, the grid the workflow talks through: each
stage is one ``send_and_receive``, so a missing or failed reply is a drop-out in that stage. A client
whose masked vector reached the server is in the sum even if it drops out while unmasking (its
neighbours' shares remove its masks), so its `fit` row is ``ok`` with ``dropped_at: unmask``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.common import parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid, ServerApp

from fedsim.messaging import collect_replies
from fedsim.seeding import derive_seed
from fedsim.server_app import ServerSpec, commit_round, roll_call, start_run
from strategies.secagg import SecAggPlusParameters, stage_of, to_state
from strategies.secagg_taps import FIT_METRICS

logger = logging.getLogger("fedsim")

NO_REPLY = "no reply before federation.round_timeout"


@contextmanager
def seeded_random(seed: int) -> Iterator[None]:
    """Seed Python's global generator (SecAggPlusWorkflow shuffles the neighbour ring with it), then restore it."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


@dataclass(frozen=True)
class Dropout:
    stage: str
    reason: str


class ProtocolMonitor(Grid):
    """Forwards every SecAgg+ stage to the grid below and notes, per node, how far it got."""

    def __init__(self, grid: Grid, on_masked_vector: Callable[[bool], None] = lambda ok: None) -> None:
        self._grid = grid
        self._on_masked_vector = on_masked_vector
        self.stages_run = 0  # SecAggPlusWorkflow sends each stage as one send_and_receive, in order
        self.sampled: list[int] = []
        self.delivered: dict[int, Message] = {}  # node -> its masked-vector reply (its update is in the sum)
        self.dropped: dict[int, Dropout] = {}

    @property
    def last_stage(self) -> str | None:
        return Stage.all()[self.stages_run - 1] if self.stages_run else None

    # --- pure delegation
    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        self._grid.set_run(run)

    @property
    def run(self):  # type: ignore[no-untyped-def,override]
        return self._grid.run

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[no-untyped-def,override]
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._grid.pull_messages(message_ids)

    # --- watching the protocol
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        stage = stage_of(messages[0]) if messages else Stage.all()[self.stages_run]
        self.stages_run += 1
        if stage == Stage.SETUP:
            self.sampled = [message.metadata.dst_node_id for message in messages]

        def on_reply(reply: Message) -> None:
            node = reply.metadata.src_node_id
            if reply.has_error():
                self._drop(node, stage, reply.error.reason)
            elif stage == Stage.COLLECT_MASKED_VECTORS:
                self.delivered[node] = reply
            if stage == Stage.COLLECT_MASKED_VECTORS or (reply.has_error() and node not in self.delivered):
                self._on_masked_vector(not reply.has_error())

        replies = collect_replies(self._grid, messages, timeout, on_reply)
        answered = {reply.metadata.src_node_id for reply in replies}
        for message in messages:
            if message.metadata.dst_node_id not in answered:
                self._drop(message.metadata.dst_node_id, stage, NO_REPLY)
                if message.metadata.dst_node_id not in self.delivered:
                    self._on_masked_vector(False)
        return replies

    def _drop(self, node: int, stage: str, reason: str) -> None:
        self.dropped.setdefault(node, Dropout(stage, reason))


def fit_rows(
    server_round: int, monitor: ProtocolMonitor, partition_of_node: dict[int, int], summed: bool
) -> list[dict[str, Any]]:
    """One `fit` row per sampled client: ``ok`` when its masked vector is in the sum, with who dropped where."""
    rows = []
    for node in sorted(monitor.sampled, key=partition_of_node.__getitem__):
        row: dict[str, Any] = {"round": server_round, "event": "fit", "client": partition_of_node[node]}
        if node in monitor.delivered:
            metrics = dict(monitor.delivered[node].content.config_records[FIT_METRICS])
            metrics.pop("partition-id", None)
            row |= {"status": "ok", **{key.replace("-", "_"): value for key, value in metrics.items()}}
        else:
            row["status"] = "failed"
        if node in monitor.dropped:
            dropout = monitor.dropped[node]
            row |= {"dropped_at": dropout.stage, "error": dropout.reason}
        elif node not in monitor.delivered or not summed:
            row["error"] = f"secure aggregation halted after stage '{monitor.last_stage}': too few clients left"
        rows.append(row)
    return rows


def run_secagg_rounds(spec: ServerSpec, parameters: SecAggPlusParameters, grid: Grid, context: Context) -> None:
    config, store, strategy, progress = spec.config, spec.store, spec.strategy, spec.progress
    federation = config.federation
    node_of_partition = roll_call(grid, federation.num_clients)
    partition_of_node = {node: partition for partition, node in node_of_partition.items()}
    strategy.bind(node_of_partition)
    clients = SimpleClientManager()
    for node in node_of_partition.values():
        clients.register(GridClientProxy(node, grid, context.run_id))
    legacy = LegacyContext(
        context, config=ServerConfig(num_rounds=federation.rounds), strategy=strategy, client_manager=clients
    )
    workflow = parameters.workflow()

    state = spec.initial_state
    start_run(spec)
    round_config = ConfigRecord()
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = round_config
    for server_round in range(spec.start_round + 1, federation.rounds + 1):
        started = time.perf_counter()
        progress.round_started(server_round, len(strategy.sample_partitions(server_round)))
        round_config[WorkflowKey.CURRENT_ROUND] = server_round
        sent = legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(state)
        monitor = ProtocolMonitor(grid, progress.client_done)
        with seeded_random(derive_seed(config.seed, "secagg-neighbours", server_round)):
            workflow(monitor, legacy)
        released = legacy.state.array_records[MAIN_PARAMS_RECORD]
        if released is not sent:  # the workflow stores what the strategy's aggregate_fit returned
            state = to_state(parameters_to_ndarrays(compat.arrayrecord_to_parameters(released, keep_input=True)), state)
        summed = strategy.summed.get(server_round)  # masked vectors in the unmasked sum; None: the protocol halted
        rows = fit_rows(server_round, monitor, partition_of_node, summed is not None)
        for row in rows:
            store.append(row)
            if row["status"] == "failed" or "dropped_at" in row:
                logger.warning("round %d: client %d: %s", server_round, row["client"], row["error"])
        if summed is None:
            logger.warning("round %d: secure aggregation halted after stage '%s'; global model unchanged",
                           server_round, monitor.last_stage)
        commit_round(
            spec,
            server_round,
            state,
            {
                "clients_ok": sum(row["status"] == "ok" for row in rows),
                "clients_failed": sum(row["status"] == "failed" for row in rows),
                "model_updated": released is not sent,
                "secagg_dropped": sorted(partition_of_node[node] for node in monitor.dropped),
                "secagg_halted_after": None if summed is not None else monitor.last_stage,
                **parameters.row(),
            },
            started,
        )


def build_secagg_server_app(spec: ServerSpec, parameters: SecAggPlusParameters) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_secagg_rounds(spec, parameters, spec.wrap_grid(grid) if spec.wrap_grid else grid, context)

    return app
