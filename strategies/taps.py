"""Where an adversary listens: on the wire (a Grid wrapper) or inside the server (a strategy wrapper).

Both taps copy what their position really exposes into ``TappedUpdate`` records and hand them to a
sink; they never change a message. The wire tap (`mitm`) sees every train message as sent, after
any client-side defense, and the global model in the server's outgoing messages. The server tap
(`server`, honest-but-curious) sees the replies the strategy is given to aggregate and the aggregate
it returns; under a secure-aggregation strategy that is the sum alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid

from fedsim.messaging import collect_replies

AGGREGATE = "aggregate"


@dataclass(frozen=True)
class TappedUpdate:
    """One update as a tap saw it."""

    round: int
    tap: str  # "mitm" | "server"
    source: str  # "client:<id>" | "aggregate"
    global_state: dict[str, torch.Tensor]  # what the clients started from
    observed_state: dict[str, torch.Tensor]  # what was sent (or aggregated)
    num_examples: int
    local_steps: int | None  # as reported in the reply's metrics, when it was
    contributors: tuple[int, ...]  # client ids behind the update
    # Sample count of each contributor, where the protocol sends them in clear beside a secure aggregate
    # (SecAgg+); empty when only the total is known.
    contributor_examples: tuple[int, ...] = ()


Sink = Callable[[TappedUpdate], None]
RoundFilter = Callable[[int], bool]  # copying whole models is only worth it in rounds someone attacks


def every_round(server_round: int) -> bool:
    return True


def _reply_metrics(reply: Message) -> MetricRecord:
    return next(iter(reply.content.metric_records.values()))


def _state(arrays: ArrayRecord) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in arrays.to_torch_state_dict().items()}


def client_update(tap: str, server_round: int, global_state: dict[str, torch.Tensor], reply: Message) -> TappedUpdate:
    metrics = _reply_metrics(reply)
    client = int(metrics["partition-id"])
    steps = metrics.get("local-steps")
    return TappedUpdate(
        round=server_round,
        tap=tap,
        source=f"client:{client}",
        global_state=global_state,
        observed_state=_state(reply.content["arrays"]),
        num_examples=int(metrics["num-examples"]),
        local_steps=int(steps) if steps is not None else None,
        contributors=(client,),
    )


class WireTap(Grid):
    """A Grid that forwards everything and copies train traffic to the sink (man-in-the-middle)."""

    def __init__(self, grid: Grid, sink: Sink, wants: RoundFilter = every_round) -> None:
        self._grid = grid
        self._sink = sink
        self._wants = wants
        self._lock = threading.Lock()
        self._sent: dict[str, tuple[int, dict[str, torch.Tensor]]] = {}  # message id -> (round, global state)

    # --- pure delegation
    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        self._grid.set_run(run)

    @property
    def run(self):  # type: ignore[override]
        return self._grid.run

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[override]
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return self._grid.get_nodes()

    def __getattr__(self, name: str):
        return getattr(self._grid, name)

    # --- listening
    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(self._grid.push_messages(messages))
        states: dict[int, dict[str, torch.Tensor]] = {}  # one copy per distinct payload, not per client
        with self._lock:
            for message, message_id in zip(messages, ids):
                if message.metadata.message_type != MessageType.TRAIN:
                    continue
                content = message.content
                server_round = int(content["config"]["server-round"])
                if not self._wants(server_round):
                    continue
                payload = content["arrays"]
                if id(payload) not in states:
                    states[id(payload)] = _state(payload)
                self._sent[message_id] = (server_round, states[id(payload)])
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._grid.pull_messages(message_ids))
        for reply in replies:
            with self._lock:
                sent = self._sent.pop(reply.metadata.reply_to_message_id, None)
            if sent is not None and not reply.has_error():
                self._sink(self._update(*sent, reply))
        return replies

    def _update(self, server_round: int, global_state: dict[str, torch.Tensor], reply: Message) -> TappedUpdate:
        """What the tap makes of one client's reply (a subclass decodes other protocols' payloads)."""
        return client_update("mitm", server_round, global_state, reply)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        # Built on our push/pull, so that nothing bypasses the tap.
        return collect_replies(self, messages, timeout)


class StrategyTap:
    """Wraps a strategy: sees the replies it aggregates and the aggregate (honest-but-curious server)."""

    def __init__(self, strategy, sink: Sink, wants: RoundFilter = every_round) -> None:
        self._strategy = strategy
        self._sink = sink
        self._wants = wants
        self._global: dict[int, dict[str, torch.Tensor]] = {}

    def __getattr__(self, name: str):
        return getattr(self._strategy, name)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        if self._wants(server_round):
            self._global[server_round] = _state(arrays)
        return self._strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        if server_round not in self._global:
            return self._strategy.aggregate_train(server_round, replies)
        replies = list(replies)
        global_state = self._global.pop(server_round)
        succeeded = [reply for reply in replies if not reply.has_error()]
        for reply in succeeded:
            if "arrays" in reply.content.array_records:
                self._sink(client_update("server", server_round, global_state, reply))
        aggregated, metrics = self._strategy.aggregate_train(server_round, replies)
        if aggregated is not None:
            clients = tuple(sorted(int(_reply_metrics(r)["partition-id"]) for r in succeeded))
            self._sink(
                TappedUpdate(
                    round=server_round,
                    tap="server",
                    source=AGGREGATE,
                    global_state=global_state,
                    observed_state=_state(aggregated),
                    num_examples=sum(int(_reply_metrics(r)["num-examples"]) for r in succeeded),
                    local_steps=None,
                    contributors=clients,
                )
            )
        return aggregated, metrics
