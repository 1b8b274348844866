"""FedAvg with reproducible client sampling and aggregation order.

Flower's FedAvg samples nodes with the global `random` module and averages replies in arrival
order. Both vary between runs, so a resumed run would drift from an uninterrupted one. Here the
sampled clients come from a seed derived from (experiment seed, round), replies are averaged in
partition order, and a round with fewer successful replies than `min_fit_clients` leaves the global
model unchanged instead of averaging too few updates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import cast

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

import fedsim.core.wire as wire
from fedsim.core.seeding import rng
from strategies.base import SAMPLE_EVALUATE, SAMPLE_TRAIN, ClientSampling, Row
from strategies.registry import STRATEGIES

logger = logging.getLogger("fedsim")


def sample_size(population: int, fraction: float, minimum: int) -> int:
    """Clients a round samples: ``fraction`` of the population, at least ``minimum``, at most everyone.

    One definition for the sampler and for whoever must know the sample size in advance (the DP
    wrapper calibrates its noise to it).
    """
    return min(population, max(minimum, math.floor(population * fraction)))


def draw_partitions(
    seed: int, partitions: Iterable[int], server_round: int, fraction: float, minimum: int, purpose: str
) -> list[int]:
    """The partitions a round samples, from a seed derived from (seed, purpose, round): the same in every run."""
    population = sorted(partitions)
    count = sample_size(len(population), fraction, minimum)
    chosen = rng(seed, purpose, server_round).choice(population, size=count, replace=False)
    return sorted(int(p) for p in chosen)


def partition_of(reply: Message) -> int:
    """The partition id a client reports in its reply's metrics."""
    return int(cast(int, wire.reply_metrics(reply)[wire.PARTITION_ID]))


@STRATEGIES.register("fedavg", help="Federated Averaging (McMahan et al. 2017), weighted by num-examples")
class FedAvg(FlowerFedAvg):
    protocol = "message"  # how it talks to clients (fedsim.engine.lifecycle.protocols): Flower's Message API

    def __init__(self, federation: ClientSampling, seed: int) -> None:
        super().__init__(
            fraction_train=federation.fraction_fit,
            fraction_evaluate=federation.fraction_evaluate,
            min_train_nodes=federation.min_fit_clients,
            min_evaluate_nodes=1 if federation.fraction_evaluate > 0 else 0,
            min_available_nodes=federation.num_clients,
        )
        self.seed = seed
        self.node_of_partition: dict[int, int] = {}

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        """Tell the strategy which node holds which partition (from the server's roll call)."""
        self.node_of_partition = dict(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        if purpose == SAMPLE_EVALUATE:
            fraction, minimum = self.fraction_evaluate, self.min_evaluate_nodes
        else:
            fraction, minimum = self.fraction_train, self.min_train_nodes
        return draw_partitions(self.seed, self.node_of_partition, server_round, fraction, minimum, purpose)

    def _messages(self, partitions: list[int], record: RecordDict, message_type: str) -> list[Message]:
        return [
            Message(content=record, message_type=message_type, dst_node_id=self.node_of_partition[p])
            for p in partitions
        ]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        partitions = self.sample_partitions(server_round, SAMPLE_TRAIN)
        config[wire.SERVER_ROUND] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._messages(partitions, record, MessageType.TRAIN)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        partitions = self.sample_partitions(server_round, SAMPLE_EVALUATE)
        config[wire.SERVER_ROUND] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._messages(partitions, record, MessageType.EVALUATE)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        ordered = sorted((r for r in replies if not r.has_error()), key=partition_of)
        if len(ordered) < self.min_train_nodes:
            logger.warning(
                "round %s: %s successful replies, fewer than min_fit_clients = %s; global model unchanged",
                server_round,
                len(ordered),
                self.min_train_nodes,
            )
            return None, None
        return super().aggregate_train(server_round, ordered)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        ordered = sorted((r for r in replies if not r.has_error()), key=partition_of)
        return super().aggregate_evaluate(server_round, ordered)

    def round_metrics(self, server_round: int) -> Row:
        """Extra fields for the round's `eval` row; wrappers with something to report (DP) override it."""
        return {}
