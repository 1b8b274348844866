"""The round driver: one loop for every protocol, recording everything as it happens.

The loop is the one of ``flwr.serverapp.strategy.Strategy.start`` with what a leakage measurement needs on
top, written once for every protocol: the roll call (which node holds which partition), starting
after round k (``--resume``), the initial model's `eval` row, a `fit` row per client as soon as it
exists, the round's `eval` row and the checkpoint that commits it, and progress client by client.

What travels in a round, and how, is the protocol's: a ``RoundProtocol`` plays one round (Message
API: ``fedsim.engine.lifecycle.message_protocol``; SecAgg+ on Flower's legacy path:
``fedsim.engine.lifecycle.secagg_protocol``) and returns the released model and its fields of the `eval` row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch
from flwr.app import Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

import fedsim.core.wire as wire
from fedsim.config import FederationConfig
from fedsim.core.messaging import PULL_INTERVAL_S, ForwardingGrid, collect_replies
from fedsim.core.stopping import StopSignal
from fedsim.engine.lifecycle.progress import LogProgress
from fedsim.engine.lifecycle.summary import training_plateau
from fedsim.rundir.writer import RunStore
from strategies.base import ServerStrategy
from strategies.secagg import SecAggConfig

logger = logging.getLogger("fedsim")

ROLL_CALL_TIMEOUT_S = 300.0
NO_REPLY = "no reply before federation.round_timeout"
NON_FINITE_AGGREGATE = "the aggregate held NaN or infinite values and was not committed"

Evaluator = Callable[[dict[str, torch.Tensor]], dict[str, float]]
State = dict[str, torch.Tensor]


class StoppableGrid(ForwardingGrid):
    """The server's grid, raising ``StopRequested`` at its next call once a stop was requested.

    Everything the server waits on polls the grid (the roll call's node count, every pull of replies, Flower's
    own SecAgg+ stages through ``send_and_receive``), so a stop reaches the server thread within a poll
    interval, wherever it waits. It sits directly on Flower's grid, under every tap.
    """

    def __init__(self, grid: Grid, stop: StopSignal) -> None:
        super().__init__(grid)
        self.stop = stop

    def get_node_ids(self) -> Iterable[int]:
        self.stop.check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self.stop.check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        self.stop.check()
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return collect_replies(self, messages, timeout)  # through this grid's pulls, which see a stop


def wait_for_nodes(grid: Grid, count: int, timeout: float = ROLL_CALL_TIMEOUT_S) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {count} clients (nodes) came up in {timeout:.0f}s")
        time.sleep(PULL_INTERVAL_S)
    return nodes


def roll_call(grid: Grid, count: int, timeout: float = ROLL_CALL_TIMEOUT_S) -> dict[int, int]:
    """Ask every node which partition it holds: partition id -> node id.

    Simulation node ids are random per run; partitions are what the seed and the results refer to. The
    replies may take as long as a round may (``timeout``): on a loaded machine the first answer waits
    for every client process to start.
    """
    nodes = wait_for_nodes(grid, count)
    queries = [Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=node) for node in nodes]
    replies = list(grid.send_and_receive(queries, timeout=max(timeout, ROLL_CALL_TIMEOUT_S)))
    failed = [r for r in replies if r.has_error()]
    if failed or len(replies) != count:
        reason = failed[0].error.reason if failed else f"{len(replies)} of {count} answered"
        raise RuntimeError(f"client roll call failed: {reason}")
    node_of_partition: dict[int, int] = {}
    for reply in replies:
        partition, node = int(cast(int, reply.content[wire.IDENTITY][wire.PARTITION_ID])), reply.metadata.src_node_id
        if not 0 <= partition < count:
            raise RuntimeError(
                f"client roll call failed: node {node} holds partition-id {partition}; allowed: 0 to {count - 1}"
            )
        if partition in node_of_partition:
            raise RuntimeError(
                f"client roll call failed: nodes {node_of_partition[partition]} and {node} "
                f"both hold partition-id {partition}"
            )
        node_of_partition[partition] = node
    return node_of_partition


def client_fields(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A client's reported metrics as fields of its row: ``num-examples`` -> ``num_examples``, without its id."""
    return {key.replace("-", "_"): value for key, value in metrics.items() if key != wire.PARTITION_ID}


@dataclass(frozen=True)
class ServerSettings:
    """What the server side reads of a run's config (``fedsim.engine.assembly.server_settings_of`` takes it out)."""

    federation: FederationConfig
    seed: int
    secagg: SecAggConfig | None = None  # ``strategy.secagg`` (None: not SecAgg+)
    keep_checkpoints: bool = True  # ``output.save_checkpoints``: else only the last two stay
    last_attacked_round: int = 0  # a plateau never stops the run before it (``training_plateau``)


@dataclass
class ServerSpec:
    settings: ServerSettings
    store: RunStore
    strategy: ServerStrategy  # a registered strategy (see strategies.STRATEGIES), perhaps wrapped (DP, a tap)
    initial_state: State
    start_round: int  # last completed round (0 for a new run)
    evaluate: Evaluator
    progress: LogProgress
    wrap_grid: Callable[[Grid], Grid] | None = None  # e.g. a man-in-the-middle tap on the wire
    round_hooks: tuple[Callable[[int], object], ...] = ()  # called as a round ends, just before it is committed
    stop: StopSignal = field(default_factory=StopSignal)  # a requested stop ends the run before the next commit


@dataclass(frozen=True)
class Round:
    """One round, as the driver hands it to the protocol that plays it."""

    number: int
    state: State  # the global model the round starts from
    grid: Grid
    partition_of_node: Mapping[int, int]
    timeout: float  # seconds to wait for replies (federation.round_timeout)
    record: Callable[[dict[str, Any]], None]  # writes a row to the run's metrics at once
    client_done: Callable[[bool], None]  # one sampled client is done (ok or not): progress


@dataclass(frozen=True)
class RoundResult:
    state: State | None  # the global model the round released; None: unchanged
    outcome: dict[str, Any]  # the protocol's fields of the round's `eval` row


class RoundProtocol(Protocol):
    """How the rounds of one protocol travel; the driver does everything else."""

    def start(self, grid: Grid, context: Context, node_of_partition: Mapping[int, int]) -> None:
        """Set up what lives across rounds, once the roll call has bound the strategy."""

    def play_round(self, current: Round) -> RoundResult:
        """Send the round's messages, record each client's row, and return what the round released."""


def run_rounds(spec: ServerSpec, protocol: RoundProtocol, grid: Grid, context: Context) -> None:
    """Play rounds ``start_round + 1 .. federation.rounds`` with ``protocol``, committing each one."""
    strategy, progress = spec.strategy, spec.progress
    federation = spec.settings.federation
    node_of_partition = roll_call(grid, federation.num_clients, federation.round_timeout)
    partition_of_node = {node: partition for partition, node in node_of_partition.items()}
    strategy.bind(node_of_partition)
    protocol.start(grid, context, node_of_partition)

    state = spec.initial_state
    start_run(spec)
    for server_round in range(spec.start_round + 1, federation.rounds + 1):
        if at_plateau(spec):
            break
        started = time.perf_counter()
        progress.round_started(server_round, len(strategy.sample_partitions(server_round)))
        current = Round(
            number=server_round,
            state=state,
            grid=grid,
            partition_of_node=partition_of_node,
            timeout=federation.round_timeout,
            record=spec.store.append,
            client_done=progress.client_done,
        )
        result = protocol.play_round(current)
        outcome = result.outcome
        if result.state is not None and not all_finite(result.state):
            # a broken client or defense slipped past the clients' own check: never commit a non-finite model
            logger.error("round %d: the aggregate is not finite; the global model stays as it was", server_round)
            outcome = {**outcome, "model_updated": False, "error": NON_FINITE_AGGREGATE}
        elif result.state is not None:
            state = result.state
        # e.g. strategy.dp: noise, clipping norm, epsilon; then the protocol's counts
        commit_round(spec, server_round, state, {**strategy.round_metrics(server_round), **outcome}, started)


def at_plateau(spec: ServerSpec) -> bool:
    """Whether test accuracy has stopped improving (``federation.plateau``): then no further round is played."""
    criterion = spec.settings.federation.plateau
    if criterion is None:
        return False
    plateau = training_plateau(criterion, spec.settings.last_attacked_round, spec.store.rows())
    if plateau is not None:
        logger.info(
            "round %d: test accuracy stopped improving (%.4f at the plateau, best %.4f in round %d): training stops",
            plateau["round"],
            plateau["accuracy"],
            plateau["best_accuracy"],
            plateau["best_round"],
        )
    return plateau is not None


def all_finite(state: State) -> bool:
    return all(bool(torch.isfinite(value).all()) for value in state.values() if value.is_floating_point())


def start_run(spec: ServerSpec) -> None:
    """Score and commit the initial model (round 0) of a new run, and start the progress display."""
    if spec.start_round == 0 and spec.store.last_committed_round() is None:  # not a run resumed at round 0
        spec.store.append({"round": 0, "event": "eval", **spec.evaluate(spec.initial_state)})
        spec.store.save_checkpoint(0, spec.initial_state)
    spec.progress.start(spec.settings.federation.rounds, spec.start_round)


def commit_round(spec: ServerSpec, server_round: int, state: State, outcome: dict[str, Any], started: float) -> None:
    """Evaluate the round's global model, write its `eval` row, run the round hooks, commit the checkpoint.

    A stop requested before the `eval` row is written leaves the round uncommitted (``StopRequested``): a
    resumed run plays it again. Once the row is written, the commit goes through: it takes milliseconds."""
    spec.stop.check()
    scores = spec.evaluate(state)
    spec.stop.check()
    fields = {**scores, **outcome, "seconds": round(time.perf_counter() - started, 4)}
    record_round(spec.store, server_round, fields, state, spec.round_hooks, spec.settings.keep_checkpoints)
    spec.progress.round_finished(server_round, scores.get("accuracy"))


def record_round(
    store: RunStore,
    server_round: int,
    fields: Mapping[str, Any] | None,
    state: State | None,
    hooks: Iterable[Callable[[int], object]] = (),
    keep_checkpoints: bool = True,
) -> None:
    """Write a round's `eval` row (``fields``; None: no row), run the round hooks, then commit the round with its
    checkpoint (``state``; None: the round released no model, nothing to commit). Every run and every app audit
    commits its rounds here (``fedsim.engine.session.RunSession.commit_round``).

    ``keep_checkpoints`` False (``output.save_checkpoints``): only the last two checkpoints stay."""
    if fields is not None:
        store.append({"round": server_round, "event": "eval", **fields})
    for hook in hooks:  # before the commit: what they persist belongs to the round
        hook(server_round)
    if state is None:
        return
    store.save_checkpoint(server_round, state)  # commits the round
    if not keep_checkpoints:
        store.prune_checkpoints(keep=server_round)


def serve(spec: ServerSpec, protocol: RoundProtocol, grid: Grid, context: Context) -> None:
    """The ServerApp's work on the grid Flower hands it (a simulation's or a SuperLink's), taps included."""
    grid = StoppableGrid(grid, spec.stop)  # innermost: a stop reaches the server wherever it waits on the grid
    run_rounds(spec, protocol, spec.wrap_grid(grid) if spec.wrap_grid else grid, context)


def build_server_app(spec: ServerSpec, protocol: RoundProtocol) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        serve(spec, protocol, grid, context)

    return app
