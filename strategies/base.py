"""The strategy contract: what the round driver (``fedsim.engine.lifecycle.rounds``) calls on a server strategy.

A registered strategy, and every wrapper around one (``strategy.dp``'s mechanisms, the adversary's
server taps), implements the contract of its protocol method by method: a wrapper forwards what it
does not change explicitly, so a method missing from a wrapper is an error at once, not a silent
detour. The contracts are ``typing.Protocol``s (checked structurally, also at run time with
``isinstance``) because the strategies themselves subclass Flower's classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

Row = dict[str, float | int | str | None]  # fields a strategy adds to the round's `eval` row

# What a round samples clients for; each purpose draws from its own seed (fedsim.core.seeding).
SAMPLE_TRAIN = "sample-train"
SAMPLE_EVALUATE = "sample-evaluate"


class ClientSampling(Protocol):
    """What a strategy reads of the federation (``federation`` in a config): how many clients there are and how
    many each round samples."""

    num_clients: int
    fraction_fit: float
    min_fit_clients: int
    fraction_evaluate: float


@runtime_checkable
class ServerStrategy(Protocol):
    """What the driver asks of every strategy, whatever its protocol."""

    @property
    def protocol(self) -> str:
        """How its rounds travel (``fedsim.engine.lifecycle.protocols``): "message" or "secagg+"."""

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        """Tell the strategy which node holds which partition (from the server's roll call)."""

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        """The partitions the round samples for ``purpose`` (SAMPLE_TRAIN or SAMPLE_EVALUATE), the same in every run."""

    def round_metrics(self, server_round: int) -> Row:
        """Extra fields for the round's `eval` row (e.g. strategy.dp: noise, clipping norm, epsilon)."""


@runtime_checkable
class MessageStrategy(ServerStrategy, Protocol):
    """A strategy on Flower's Message API (``flwr.serverapp.strategy.Strategy``'s round methods)."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]: ...

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]: ...

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]: ...

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None: ...


@runtime_checkable
class LegacyStrategy(ServerStrategy, Protocol):
    """A strategy on Flower's legacy path, as ``SecAggPlusWorkflow`` drives it (``flwr.server.strategy.Strategy``)."""

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list[tuple[Any, Any]]: ...

    def aggregate_fit(
        self, server_round: int, results: list[tuple[Any, Any]], failures: list[Any]
    ) -> tuple[Any | None, dict[str, Any]]: ...

    def summed_vectors(self, server_round: int) -> int | None:
        """Masked vectors in the round's unmasked sum; None when the protocol halted before the strategy saw one."""
