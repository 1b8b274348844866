"""`strategy.name: secagg+`: FedAvg over Flower's SecAgg+ secure aggregation.

Flower 1.41 implements SecAgg+ on its legacy path only: the server runs ``SecAggPlusWorkflow`` with a
``LegacyContext`` around a legacy ``flwr.server.strategy.Strategy``, and every client runs
``secaggplus_mod`` in front of a ``NumPyClient`` (``clients.legacy_client``). The protocol is Flower's
(with one bookkeeping fix, below), in four stages (setup, share keys, collect masked vectors, unmask); each client sends
``[w, w * params]`` quantised and masked, and the workflow hands the strategy only the unmasked
weighted sum. This module holds what fedsim adds on the server side:

* ``SecAggPlusFedAvg``, the legacy strategy: the same reproducible sampling by partition as
  fedsim's FedAvg, and an ``aggregate_fit`` that releases the unmasked aggregate (Flower gives every
  ``FitRes`` the same aggregate, so averaging them again would only add rounding);
* ``SecAggPlusParameters``: the validated ``strategy.secagg`` resolved for the sampled clients,
  and the arguments Flower's workflow takes for them;
* ``EarlyDropoutSecAggPlusWorkflow``: Flower's workflow with one bookkeeping fix, so that a client
  dropping out in the setup or share-keys stage no longer loses the round;
* how to read the protocol's messages (stage, round, masked vectors).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from flwr.app import Message, MessageType
from flwr.common import FitIns, FitRes, NDArrays, Parameters, Scalar
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState
from pydantic import Field

from fedsim.base import Section
from strategies.fedavg import sample_partitions, sample_size
from strategies.registry import STRATEGIES

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig, FederationConfig

logger = logging.getLogger("fedsim")

# The stages of Flower's SecAgg+ protocol, in order (flwr.common.secure_aggregation.secaggplus_constants.Stage).
SECAGG_STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")
SECAGG_TRAINING_STAGE = "collect_masked_vectors"  # the stage in which SecAgg+ clients train and send masked vectors

SECAGG_STRATEGY = "secagg+"
SECAGG_MODULUS = 2**32  # Flower's modulus_range: the masked sum of every client's quantised update wraps at it


class SecAggConfig(Section):
    """Flower's SecAgg+ (SecAggPlusWorkflow / secaggplus_mod): masked, quantised updates; the server learns the sum."""

    num_shares: int | None = Field(
        None, ge=2, description="clients each client's secrets are shared with, itself included (null = every sampled client)"
    )
    reconstruction_threshold: int | None = Field(
        None, ge=2, description="shares that rebuild a secret; num_shares - threshold drop-outs are survived "
        "(null = a majority of num_shares)",
    )
    clipping_range: float = Field(
        8.0, gt=0, description="each client's weighted parameters (num-examples / max_weight x w) are clipped to +-this"
    )
    quantization_range: int = Field(
        2**22, ge=2, lt=2**31, description="integer levels the clipped range is quantised to (stochastic rounding)"
    )
    max_weight: float | None = Field(
        None, gt=0, description="largest client weight (num-examples) expected; null = the largest partition"
    )

    def shares(self, sampled: int) -> int:
        return self.num_shares if self.num_shares is not None else sampled

    def threshold(self, sampled: int) -> int:
        return self.reconstruction_threshold if self.reconstruction_threshold is not None else self.shares(sampled) // 2 + 1

    def check_federation(self, federation: "FederationConfig") -> None:
        """What only the number of sampled clients can tell (a one-line ValueError naming the key)."""
        sampled = sample_size(federation.num_clients, federation.fraction_fit, federation.min_fit_clients)
        if sampled < 2:
            raise ValueError(
                f"federation.num_clients = {federation.num_clients}: secagg+ samples {sampled} client per round; "
                "secure aggregation needs at least 2"
            )
        shares = self.shares(sampled)
        if shares > sampled:
            raise ValueError(
                f"strategy.secagg.num_shares = {shares}: must be <= the clients sampled per round ({sampled})"
            )
        if shares < sampled and shares % 2 == 0:
            raise ValueError(
                f"strategy.secagg.num_shares = {shares}: must be odd (a client and as many neighbours on each side) "
                f"or equal to the clients sampled per round ({sampled})"
            )
        threshold = self.threshold(sampled)
        if threshold > shares:
            raise ValueError(
                f"strategy.secagg.reconstruction_threshold = {threshold}: must be <= num_shares ({shares})"
            )
        if self.quantization_range * sampled > SECAGG_MODULUS:
            raise ValueError(
                f"strategy.secagg.quantization_range = {self.quantization_range}: the sum of {sampled} sampled clients "
                f"would overflow the 2^32 modulus; must be <= {SECAGG_MODULUS // sampled}"
            )


# fedsim's config names the stages as Flower's protocol does; a Flower upgrade that renames one must fail here.
if tuple(Stage.all()) != SECAGG_STAGES:
    raise ImportError(f"Flower's SecAgg+ stages are {Stage.all()}; strategies.secagg.SECAGG_STAGES expects {SECAGG_STAGES}")

SERVER_ROUND_KEY = "server-round"  # in every FitIns config, as in the Message-API train messages


@STRATEGIES.register(
    SECAGG_STRATEGY,
    help="FedAvg over Flower's SecAgg+: clients send masked updates, the server sees only the sum",
    config=SecAggConfig,
)
class SecAggPlusFedAvg(LegacyFedAvg):
    protocol = SECAGG_STRATEGY  # how it talks to clients (fedsim.protocols): Flower's legacy path with SecAgg+

    def __init__(self, federation: FederationConfig, seed: int) -> None:
        super().__init__(
            fraction_fit=federation.fraction_fit,
            fraction_evaluate=0.0,
            min_fit_clients=federation.min_fit_clients,
            min_evaluate_clients=0,
            min_available_clients=federation.num_clients,
        )
        self.seed = seed
        self.node_of_partition: dict[int, int] = {}
        self.summed: dict[int, int] = {}  # round -> masked vectors in its unmasked sum (absent: the protocol halted)

    def bind(self, node_of_partition: dict[int, int]) -> None:
        """Tell the strategy which node holds which partition (from the server's roll call)."""
        self.node_of_partition = dict(node_of_partition)

    def sample_partitions(self, server_round: int) -> list[int]:
        return sample_partitions(
            self.seed, self.node_of_partition, server_round, self.fraction_fit, self.min_fit_clients, "sample-train"
        )

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        proxies = client_manager.all()
        instructions = FitIns(parameters, {SERVER_ROUND_KEY: server_round})
        return [(proxies[str(self.node_of_partition[p])], instructions) for p in self.sample_partitions(server_round)]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The unmasked aggregate SecAggPlusWorkflow put into every result, or None with too few contributors."""
        self.summed[server_round] = len(results)
        if len(results) < self.min_fit_clients:
            logger.warning(
                "round %s: %s masked vectors in the sum, fewer than min_fit_clients = %s; global model unchanged",
                server_round, len(results), self.min_fit_clients,
            )
            return None, {}
        return results[0][1].parameters, {}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return []  # the global model is scored on the test set by the server (fedsim.secagg_server)


class EarlyDropoutSecAggPlusWorkflow(SecAggPlusWorkflow):
    """Flower's SecAggPlusWorkflow, forgetting the clients that drop out before their key shares go out.

    In Flower 1.41 a client that drops out in the setup or share-keys stage stays among the round's
    sampled clients, so the unmask stage counts it as dead: every neighbour is asked for its secret-key
    share, has none (a KeyError on every client) and the round is lost; had one answered, the server
    would remove pairwise masks that were never added. Such a client is in no one's masks (clients mask
    only with neighbours whose shares reached them), so after each of those two stages it leaves the
    round's bookkeeping: the sampled set and every neighbour set. The protocol itself is Flower's.
    """

    def setup_stage(self, grid: Any, context: Any, state: WorkflowState) -> bool:
        proceed = super().setup_stage(grid, context, state)
        return self._forget_dropouts(state) and proceed

    def share_keys_stage(self, grid: Any, context: Any, state: WorkflowState) -> bool:
        proceed = super().share_keys_stage(grid, context, state)
        return self._forget_dropouts(state) and proceed

    def _forget_dropouts(self, state: WorkflowState) -> bool:
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
    def from_config(cls, config: ExperimentConfig, largest_partition: int) -> SecAggPlusParameters:
        secagg, federation = config.strategy.secagg, config.federation
        assert secagg is not None, f"strategy.name is not {SECAGG_STRATEGY}"
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


# ------------------------------------------------------------------------------ reading the protocol


def stage_of(message: Message) -> str | None:
    """The SecAgg+ stage a server message asks for (None for any other message)."""
    if message.metadata.message_type != MessageType.TRAIN or RECORD_KEY_CONFIGS not in message.content.config_records:
        return None
    stage = message.content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE)
    return str(stage) if stage is not None else None


def round_of(message: Message) -> int:
    """SecAggPlusWorkflow tags every stage message of a round with the round as its group id."""
    return int(message.metadata.group_id)


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


def decode_masked_vector(
    masked: Sequence[np.ndarray], num_examples: int, clipping_range: float, quantization_range: int, max_weight: float
) -> NDArrays:
    """Read a client's masked vector as one would read it unmasked: what an eavesdropper can make of it.

    A client sends ``[q(w), q(w * params)] + masks mod 2^32`` with ``w = num_examples / max_weight``
    and ``q`` the quantiser; the first array is the masked weight factor, dropped here (the count is in
    clear anyway). An honest ``q`` lies in ``[0, quantization_range)``, so the entries are reduced into
    that range, dequantised and divided by ``w``. The masks are uniform mod 2^32 and the quantisation
    range divides 2^32, so the result is uniform noise over ``+-clipping_range / w``, whatever the update.
    """
    ratio = round(num_examples / max_weight * quantization_range) / quantization_range
    body = [np.asarray(array) % quantization_range for array in masked[1:]]
    return [array / ratio for array in dequantize(body, clipping_range, quantization_range)]
