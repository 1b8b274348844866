"""`strategy.name: secagg+`: FedAvg over Flower's SecAgg+ secure aggregation.

Flower 1.41 implements SecAgg+ on its legacy path only: the server runs ``SecAggPlusWorkflow`` with a
``LegacyContext`` around a legacy ``flwr.server.strategy.Strategy``, and every client runs
``secaggplus_mod`` in front of a ``NumPyClient`` (``clients.legacy_client``). The protocol is Flower's,
in four stages (setup, share keys, collect masked vectors, unmask); each client sends
``[w, w * params]`` quantised and masked, and the workflow hands the strategy only the unmasked
weighted sum. The round itself (workflow, drop-outs, rows) is played by
``fedsim.engine.lifecycle.secagg_protocol``; what each tap sees is ``adversary.secagg_taps``.

``SecAggPlusFedAvg`` is the legacy strategy: the same reproducible sampling by partition as
fedsim's FedAvg, and an ``aggregate_fit`` that releases the unmasked aggregate (Flower gives every
``FitRes`` the same aggregate, so averaging them again would only add rounding). Under a client-level
privacy audit (``canary_weight`` set) it hands each sampled client a slot of the canary clients to carry
inside its masked vector (``adversary.privacy_audit.canaries.CarriedCanaries``). ``SecAggConfig`` is its
`strategy.secagg` section.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flwr.common import FitIns, FitRes, Parameters, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as LegacyFedAvg
from pydantic import Field

import fedsim.core.wire as wire
from fedsim.core.sections import Section
from fedsim.core.wire import SECAGG_STAGES, SECAGG_TRAINING_STAGE
from strategies.base import SAMPLE_TRAIN, ClientSampling, Row
from strategies.fedavg import draw_partitions, sample_size
from strategies.registry import STRATEGIES

__all__ = [
    "SECAGG_MODULUS",
    "SECAGG_STAGES",
    "SECAGG_STRATEGY",
    "SECAGG_TRAINING_STAGE",
    "SecAggConfig",
    "SecAggPlusFedAvg",
]

logger = logging.getLogger("fedsim")

SECAGG_STRATEGY = "secagg+"
SECAGG_MODULUS = 2**32  # Flower's modulus_range: the masked sum of every client's quantised update wraps at it


class SecAggConfig(Section):
    """Flower's SecAgg+ (SecAggPlusWorkflow / secaggplus_mod): masked, quantised updates; the server learns the sum."""

    num_shares: int | None = Field(
        None,
        ge=2,
        description="clients each client's secrets are shared with, itself included (null = every sampled client)",
    )
    reconstruction_threshold: int | None = Field(
        None,
        ge=2,
        description="shares that rebuild a secret; num_shares - threshold drop-outs are survived "
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
        return (
            self.reconstruction_threshold
            if self.reconstruction_threshold is not None
            else self.shares(sampled) // 2 + 1
        )

    def check_federation(self, federation: ClientSampling) -> None:
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


@STRATEGIES.register(
    SECAGG_STRATEGY,
    help="FedAvg over Flower's SecAgg+: clients send masked updates, the server sees only the sum",
    config=SecAggConfig,
)
class SecAggPlusFedAvg(LegacyFedAvg):
    # how it talks to clients (fedsim.engine.lifecycle.protocols): Flower's legacy path with SecAgg+
    protocol = SECAGG_STRATEGY

    def __init__(self, federation: ClientSampling, seed: int) -> None:
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
        self.canary_weight: float | None = None  # a client-level audit's canary clients' weight (examples)

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        """Tell the strategy which node holds which partition (from the server's roll call)."""
        self.node_of_partition = dict(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        """The round's training sample; SecAgg+ clients evaluate nothing (the server scores the model)."""
        if purpose != SAMPLE_TRAIN:
            return []
        return draw_partitions(
            self.seed, self.node_of_partition, server_round, self.fraction_fit, self.min_fit_clients, purpose
        )

    def summed_vectors(self, server_round: int) -> int | None:
        """Masked vectors in the round's unmasked sum; None when the protocol halted before aggregation."""
        return self.summed.get(server_round)

    def round_metrics(self, server_round: int) -> Row:
        return {}  # the protocol's own fields come from fedsim.engine.lifecycle.secagg_protocol

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        proxies = client_manager.all()
        sampled = self.sample_partitions(server_round)
        return [
            (
                proxies[str(self.node_of_partition[partition])],
                FitIns(parameters, self._fit_config(server_round, slot, len(sampled))),
            )
            for slot, partition in enumerate(sampled)
        ]

    def _fit_config(self, server_round: int, slot: int, slots: int) -> dict[str, Scalar]:
        """The round number, and under an audit the slot of the canary clients the client carries."""
        config: dict[str, Scalar] = {wire.SERVER_ROUND: server_round}
        if self.canary_weight is not None:
            config |= {wire.CANARY_SLOT: slot, wire.CANARY_SLOTS: slots, wire.CANARY_WEIGHT: self.canary_weight}
        return config

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
                server_round,
                len(results),
                self.min_fit_clients,
            )
            return None, {}
        return results[0][1].parameters, {}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return []  # the global model is scored on the test set by the server (fedsim.engine.lifecycle.rounds)
