"""Where an adversary listens: on the wire (a Grid wrapper) or inside the server (a strategy wrapper).

Both taps copy what their position really exposes into ``TappedUpdate`` records and hand them to a
sink; they never change a message. The wire tap (`mitm`) sees every train message as sent, after
any client-side defense, and the global model in the server's outgoing messages. The server tap
(`server`, honest-but-curious) sees the replies the strategy is given to aggregate and the aggregate
it returns; under a secure-aggregation strategy that is the sum alone. (What they see under SecAgg+:
``adversary.secagg_taps``.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from fedsim.core.messaging import ForwardingGrid, collect_replies
from strategies.base import SAMPLE_TRAIN, MessageStrategy, Row

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


@dataclass(frozen=True)
class ClientReport:
    """What a client states in clear beside its update: who it is, how many samples, how many steps."""

    client: int
    num_examples: int
    local_steps: int | None

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any], num_examples: int | None = None) -> ClientReport:
        """From a reply's metrics; ``num_examples`` where the protocol carries the count elsewhere (legacy FitRes)."""
        steps = metrics.get(wire.LOCAL_STEPS)
        return cls(
            client=int(metrics[wire.PARTITION_ID]),
            num_examples=int(metrics[wire.NUM_EXAMPLES]) if num_examples is None else int(num_examples),
            local_steps=int(steps) if steps is not None else None,
        )


def tapped_update(
    tap: str,
    server_round: int,
    global_state: dict[str, torch.Tensor],
    observed_state: dict[str, torch.Tensor],
    behind: Sequence[ClientReport],
    *,
    aggregate: bool = False,
    counts_in_clear: bool = False,
) -> TappedUpdate:
    """The one way a tap records what it saw: one client's update, or an ``aggregate`` of those ``behind`` it.

    ``counts_in_clear``: the protocol sends each contributor's sample count beside the update (SecAgg+).
    """
    return TappedUpdate(
        round=server_round,
        tap=tap,
        source=AGGREGATE if aggregate else f"client:{behind[0].client}",
        global_state=global_state,
        observed_state=observed_state,
        num_examples=sum(report.num_examples for report in behind),
        local_steps=None if aggregate else behind[0].local_steps,
        contributors=tuple(report.client for report in behind),
        contributor_examples=tuple(report.num_examples for report in behind) if counts_in_clear else (),
    )


Sink = Callable[[TappedUpdate], None]
RoundFilter = Callable[[int], bool]  # copying whole models is only worth it in rounds someone attacks


def every_round(server_round: int) -> bool:
    return True


def _state(arrays: ArrayRecord) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in arrays.to_torch_state_dict().items()}


def client_update(tap: str, server_round: int, global_state: dict[str, torch.Tensor], reply: Message) -> TappedUpdate:
    """One Message-API client's reply as a tap records it."""
    report = ClientReport.from_metrics(wire.reply_metrics(reply))
    return tapped_update(tap, server_round, global_state, _state(reply.content.array_records[wire.ARRAYS]), [report])


class WireTap(ForwardingGrid):
    """A Grid that forwards everything and copies train traffic to the sink (man-in-the-middle)."""

    def __init__(self, grid: Grid, sink: Sink, wants: RoundFilter = every_round) -> None:
        super().__init__(grid)
        self._sink = sink
        self._wants = wants
        self._lock = threading.Lock()
        self._sent: dict[str, tuple[int, dict[str, torch.Tensor]]] = {}  # message id -> (round, global state)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(self._grid.push_messages(messages))
        states: dict[int, dict[str, torch.Tensor]] = {}  # one copy per distinct payload, not per client
        with self._lock:
            for message, message_id in zip(messages, ids):
                if message.metadata.message_type != MessageType.TRAIN:
                    continue
                content = message.content
                server_round = int(cast(int, content.config_records[wire.CONFIG][wire.SERVER_ROUND]))
                if not self._wants(server_round):
                    continue
                payload = content.array_records[wire.ARRAYS]
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


class ListeningStrategy:
    """What every strategy tap shares: the wrapped strategy, what it listens for, and the part of the
    strategy contract that every protocol has, forwarded explicitly (no ``__getattr__``)."""

    def __init__(self, strategy: Any, sink: Sink, wants: RoundFilter = every_round) -> None:
        self.strategy = strategy
        self.protocol = strategy.protocol
        self._sink = sink
        self._wants = wants
        self._global: dict[int, dict[str, torch.Tensor]] = {}  # round -> the global model it sent

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        self.strategy.bind(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        return self.strategy.sample_partitions(server_round, purpose)

    def round_metrics(self, server_round: int) -> Row:
        return self.strategy.round_metrics(server_round)


class StrategyTap(ListeningStrategy):
    """Wraps a strategy: sees the replies it aggregates and the aggregate (honest-but-curious server).

    Everything else of the strategy contract is forwarded as it is.
    """

    strategy: MessageStrategy

    # --- forwarded

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    # --- listening
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self._wants(server_round):
            self._global[server_round] = _state(arrays)
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if server_round not in self._global:
            return self.strategy.aggregate_train(server_round, replies)
        replies = list(replies)
        global_state = self._global.pop(server_round)
        succeeded = [reply for reply in replies if not reply.has_error()]
        for reply in succeeded:
            if wire.ARRAYS in reply.content.array_records:
                self._sink(client_update("server", server_round, global_state, reply))
        aggregated, metrics = self.strategy.aggregate_train(server_round, replies)
        if aggregated is not None:
            behind = sorted(
                (ClientReport.from_metrics(wire.reply_metrics(r)) for r in succeeded), key=lambda r: r.client
            )
            self._sink(tapped_update("server", server_round, global_state, _state(aggregated), behind, aggregate=True))
        return aggregated, metrics
