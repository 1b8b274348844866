"""A SecAgg+ round: Flower's ``SecAggPlusWorkflow`` on its legacy path, played by fedsim's round driver.

Flower runs SecAgg+ as the fit step of its legacy ``DefaultWorkflow``, whose loop always starts at
round 1 and keeps no per-client record. ``SecAggRounds`` keeps Flower's pieces as they are (a
``LegacyContext`` holding the legacy strategy and a client manager of Flower's client proxies over the grid, and
``SecAggPlusWorkflow`` called once per round, exactly as ``DefaultWorkflow`` calls its fit workflow);
the driver (``fedsim.engine.lifecycle.rounds``) adds the roll call, resuming, the `eval` row and the commit.

Who did what is read off the wire by ``ProtocolMonitor``, the grid the workflow talks through: each
stage is one ``send_and_receive``, so a missing or failed reply is a drop-out in that stage. A client
whose masked vector reached the server is in the sum even if it drops out while unmasking (its
neighbours' shares remove its masks), so its `fit` row is ``ok`` with ``dropped_at: unmask``.

Two defects of Flower 1.41 are worked around: a client dropping out before its key shares went out
loses the round (``EarlyDropoutSecAggPlusWorkflow``), and 0-d arrays are not rescaled by the unmask
(the clients send them as 1-element arrays, ``clients.legacy_client``; ``to_state`` restores them).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.common import NDArrays, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import Stage
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import SimpleClientManager
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from fedsim.config import FederationConfig
from fedsim.core.flower_private import grid_client_proxy, recorddict_compat
from fedsim.core.messaging import ForwardingGrid, collect_replies
from fedsim.core.seeding import derive_seed
from fedsim.engine.lifecycle.rounds import NO_REPLY, Round, RoundResult, client_fields
from strategies.base import LegacyStrategy
from strategies.fedavg import sample_size
from strategies.secagg import SecAggConfig

logger = logging.getLogger("fedsim")


class EarlyDropoutSecAggPlusWorkflow(SecAggPlusWorkflow):
    """Flower's SecAggPlusWorkflow, forgetting the clients that drop out before their key shares go out.

    In Flower 1.41 a client that drops out in the setup or share-keys stage stays among the round's
    sampled clients, so the unmask stage counts it as dead: every neighbour is asked for its secret-key
    share, has none (a KeyError on every client) and the round is lost; had one answered, the server
    would remove pairwise masks that were never added. Such a client is in no one's masks (clients mask
    only with neighbours whose shares reached them), so after each of those two stages it leaves the
    round's bookkeeping: the sampled set and every neighbour set. The protocol itself is Flower's.
    """

    def setup_stage(self, grid: Any, context: Any, state: Any) -> bool:
        proceed = super().setup_stage(grid, context, state)
        return self._forget_dropouts(state) and proceed

    def share_keys_stage(self, grid: Any, context: Any, state: Any) -> bool:
        proceed = super().share_keys_stage(grid, context, state)
        return self._forget_dropouts(state) and proceed

    def _forget_dropouts(self, state: Any) -> bool:
        gone = state.sampled_node_ids - state.active_node_ids
        if gone:
            state.sampled_node_ids = set(state.active_node_ids)
            for node in gone:
                state.nid_to_neighbours.pop(node, None)
            for neighbours in state.nid_to_neighbours.values():
                neighbours -= gone
        return self._check_threshold(state)


@dataclass(frozen=True)
class SecAggPlusParameters:
    """``strategy.secagg`` resolved for the clients a round samples, with the run's largest client weight."""

    sampled: int
    num_shares: int
    threshold: int
    clipping_range: float
    quantization_range: int
    max_weight: float
    timeout: float  # seconds each stage waits for replies; a client silent that long has dropped out

    @classmethod
    def of(cls, secagg: SecAggConfig, federation: FederationConfig, largest_partition: int) -> SecAggPlusParameters:
        """The parameters of ``strategy.secagg`` for ``federation``'s sampled clients; ``largest_partition``: the
        default ``max_weight``."""
        sampled = sample_size(federation.num_clients, federation.fraction_fit, federation.min_fit_clients)
        return cls(
            sampled=sampled,
            num_shares=secagg.shares(sampled),
            threshold=secagg.threshold(sampled),
            clipping_range=secagg.clipping_range,
            quantization_range=secagg.quantization_range,
            max_weight=secagg.max_weight if secagg.max_weight is not None else float(largest_partition),
            timeout=federation.round_timeout,
        )

    def flower_arguments(self) -> dict[str, Any]:
        """SecAggPlusWorkflow's arguments for these integers.

        Flower reads an int ``num_shares`` literally but rejects 2 (and a threshold equal to the shares),
        both valid for the protocol; its float forms are fractions of the sampled clients / of the shares,
        and 1.0 resolves exactly to all of them. So "every sampled client" and "every share" go as 1.0.
        """
        return {
            "num_shares": 1.0 if self.num_shares == self.sampled else self.num_shares,
            "reconstruction_threshold": 1.0 if self.threshold == self.num_shares else self.threshold,
            "max_weight": self.max_weight,
            "clipping_range": self.clipping_range,
            "quantization_range": self.quantization_range,
            "timeout": self.timeout,
        }

    def aggregate_noise(self, counts: Sequence[int]) -> float:
        """The standard deviation of the quantisation noise in each entry of the unmasked aggregate of clients with
        ``counts`` samples (SecAgg+ sends the counts in clear), from these public parameters.

        Each client scales its weights by its weight factor q_k / L (q_k = round(n_k / max_weight L), L the
        quantization range) and rounds them stochastically to the grid of step 2 clipping_range / L: a value a
        fraction f of a step above a grid point moves up by (1 - f) step with probability f, else down by f step,
        variance f (1 - f) step^2, step^2 / 6 on average over f. The clients round independently and the unmask
        divides their sum by sum_k q_k / L, so each entry carries step sqrt(K / 6) / (sum_k q_k / L). Clipping
        (weights beyond +-clipping_range) is a bias, not counted here.
        """
        levels = self.quantization_range
        factors = sum(round(count / self.max_weight * levels) for count in counts)  # as secaggplus_mod rounds them
        step = 2 * self.clipping_range / levels
        return step * math.sqrt(len(counts) / 6) / (factors / levels)

    def workflow(self) -> SecAggPlusWorkflow:
        return EarlyDropoutSecAggPlusWorkflow(**self.flower_arguments())

    def row(self) -> dict[str, float | int]:
        """The protocol settings, for the round's `eval` row."""
        return {
            "secagg_num_shares": self.num_shares,
            "secagg_threshold": self.threshold,
            "secagg_clipping_range": self.clipping_range,
            "secagg_quantization_range": self.quantization_range,
            "secagg_max_weight": self.max_weight,
        }


def to_state(arrays: NDArrays, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Legacy parameters (state_dict values in order) back to a state dict with ``like``'s names and dtypes.

    The unmasked aggregate comes back as float64; integer buffers (BatchNorm's num_batches_tracked) are
    rounded, as averaging them under FedAvg would.
    """
    state = {}
    for (name, reference), array in zip(like.items(), arrays, strict=True):
        tensor = torch.as_tensor(np.array(array))
        if not reference.is_floating_point():
            tensor = tensor.round()
        state[name] = tensor.to(reference.dtype).reshape(reference.shape)
    return state


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
    stage: str | None
    reason: str | None


class ProtocolMonitor(ForwardingGrid):
    """Forwards every SecAgg+ stage to the grid below and notes, per node, how far it got."""

    def __init__(self, grid: Grid, on_masked_vector: Callable[[bool], None] = lambda ok: None) -> None:
        super().__init__(grid)
        self._on_masked_vector = on_masked_vector
        self.stages_run = 0  # SecAggPlusWorkflow sends each stage as one send_and_receive, in order
        self.sampled: list[int] = []
        self.delivered: dict[int, Message] = {}  # node -> its masked-vector reply (its update is in the sum)
        self.dropped: dict[int, Dropout] = {}

    @property
    def last_stage(self) -> str | None:
        return Stage.all()[self.stages_run - 1] if self.stages_run else None

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        stage = wire.stage_of(messages[0]) if messages else Stage.all()[self.stages_run]
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

    def _drop(self, node: int, stage: str | None, reason: str | None) -> None:
        self.dropped.setdefault(node, Dropout(stage, reason))


def fit_rows(
    server_round: int, monitor: ProtocolMonitor, partition_of_node: Mapping[int, int], summed: bool
) -> list[dict[str, Any]]:
    """One `fit` row per sampled client: ``ok`` exactly when its masked vector is in the released sum (a halted
    round has none), ``failed`` with the reason otherwise, and who dropped out in which stage."""
    rows = []
    for node in sorted(monitor.sampled, key=partition_of_node.__getitem__):
        row: dict[str, Any] = {"round": server_round, "event": "fit", "client": partition_of_node[node]}
        if node in monitor.delivered:  # it trained: its metrics stand, whether or not its vector was summed
            metrics = monitor.delivered[node].content.config_records[wire.FIT_METRICS]
            row |= client_fields(metrics)
        # ok means: its update is in the released aggregate; nothing else is
        row["status"] = "ok" if node in monitor.delivered and summed else "failed"
        if node in monitor.dropped:
            dropout = monitor.dropped[node]
            row |= {"dropped_at": dropout.stage, "error": dropout.reason}
        elif not summed:
            delivered = (
                "its masked vector was delivered but never summed"
                if node in monitor.delivered
                else "it sent no masked vector"
            )
            row["error"] = (
                f"secure aggregation halted after stage '{monitor.last_stage}': too few clients left; {delivered}"
            )
        elif node not in monitor.delivered:
            row["error"] = "no masked vector in the sum"
        rows.append(row)
    return rows


class SecAggRounds:
    """Plays rounds with a ``LegacyStrategy`` through Flower's SecAgg+ workflow."""

    def __init__(self, strategy: LegacyStrategy, parameters: SecAggPlusParameters, seed: int, rounds: int) -> None:
        self.strategy = strategy
        self.parameters = parameters
        self.seed = seed
        self.rounds = rounds

    def start(self, grid: Grid, context: Context, node_of_partition: Mapping[int, int]) -> None:
        clients = SimpleClientManager()
        for node in node_of_partition.values():
            clients.register(grid_client_proxy(node, grid, context.run_id))
        self.legacy = LegacyContext(
            context,
            config=ServerConfig(num_rounds=self.rounds),
            strategy=cast(Strategy, self.strategy),
            client_manager=clients,
        )
        self.workflow = self.parameters.workflow()
        self.round_config = ConfigRecord()
        self.legacy.state.config_records[MAIN_CONFIGS_RECORD] = self.round_config

    def play_round(self, current: Round) -> RoundResult:
        server_round, legacy = current.number, self.legacy
        self.round_config[WorkflowKey.CURRENT_ROUND] = server_round
        sent = legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(current.state)
        monitor = ProtocolMonitor(current.grid, current.client_done)
        with seeded_random(derive_seed(self.seed, "secagg-neighbours", server_round)):
            self.workflow(monitor, legacy)
        released = legacy.state.array_records[MAIN_PARAMS_RECORD]
        state = None
        if released is not sent:  # the workflow stores what the strategy's aggregate_fit returned
            arrays = parameters_to_ndarrays(recorddict_compat().arrayrecord_to_parameters(released, keep_input=True))
            state = to_state(arrays, current.state)
        summed = self.strategy.summed_vectors(server_round)  # None: the protocol halted
        rows = fit_rows(server_round, monitor, current.partition_of_node, summed is not None)
        for row in rows:
            current.record(row)
            if row["status"] == "failed" or "dropped_at" in row:
                logger.warning("round %d: client %d: %s", server_round, row["client"], row["error"])
        if summed is None:
            logger.warning(
                "round %d: secure aggregation halted after stage '%s'; global model unchanged",
                server_round,
                monitor.last_stage,
            )
        return RoundResult(
            state,
            {
                "clients_ok": sum(row["status"] == "ok" for row in rows),
                "clients_failed": sum(row["status"] == "failed" for row in rows),
                "model_updated": released is not sent,
                "secagg_dropped": sorted(current.partition_of_node[node] for node in monitor.dropped),
                "secagg_halted_after": None if summed is not None else monitor.last_stage,
                **self.parameters.row(),
            },
        )
