"""A malicious server (``adversary.server: malicious``): it sends a modified model in the attacked rounds.

Within what a real Flower deployment lets the server's author do: the modified module travels to the clients
in the train message, its architecture as a description that holds no code (``wire.SERVED_MODEL``,
``adversary.modifications.served``) and its weights as the message's arrays; the clients build it from their
own code and train exactly what they receive through their usual local training and defenses. The server wraps
its strategy (outside the server tap, so the tap records the modified model as what the clients started from);
in an attacked round it hands the replies to the strategy only for the tap to see them, and releases no
aggregate: the global model goes on from the previous round.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.serverapp import Grid
from torch import nn

import fedsim.core.wire as wire
from adversary.modifications import MODIFICATIONS, ModificationConfig
from adversary.modifications.base import PublicData
from adversary.modifications.served import describe
from strategies.base import SAMPLE_TRAIN, Row

RoundModel = Callable[[int, nn.Module], None]


class _Modifier:
    """What both protocols' malicious servers share: the modification and when to apply it."""

    def __init__(
        self,
        strategy: Any,
        modification: ModificationConfig,
        architecture: nn.Module,
        input_shape: tuple[int, int, int],
        num_classes: int,
        public: PublicData | None,
        seed: int,
        attacks_round: Callable[[int], bool],
        on_round_model: RoundModel,
    ) -> None:
        self.strategy = strategy
        self.protocol = strategy.protocol
        self.modification = modification
        self.architecture = architecture
        self.input_shape = input_shape
        self.num_classes = num_classes
        self.public = public
        self.seed = seed
        self.attacks_round = attacks_round
        self.on_round_model = on_round_model

    def modified(self, global_state: Mapping[str, torch.Tensor]) -> nn.Module:
        """The module sent this round: the agreed model at the global weights, modified (a modification may set
        every weight itself, as ``imprint`` does by default, so that the global state does not matter)."""
        agreed = copy.deepcopy(self.architecture)
        agreed.load_state_dict(global_state)
        build = MODIFICATIONS.get(self.modification.name)
        return build(self.modification, agreed, self.input_shape, self.num_classes, self.public, self.seed)

    # --- the strategy contract, forwarded

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        self.strategy.bind(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        return self.strategy.sample_partitions(server_round, purpose)

    def round_metrics(self, server_round: int) -> Row:
        row = dict(self.strategy.round_metrics(server_round))
        if self.attacks_round(server_round):
            row["server_modified_model"] = self.modification.name
        return row


class MaliciousServer(_Modifier):
    """Wraps a Message-API strategy: modified model out, no aggregate back, in the rounds it attacks."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if not self.attacks_round(server_round):
            return self.strategy.configure_train(server_round, arrays, config, grid)
        module = self.modified(arrays.to_torch_state_dict())
        self.on_round_model(server_round, copy.deepcopy(module))
        served = ConfigRecord({**dict(config), wire.SERVED_MODEL: describe(module)})
        state = {name: value.detach().clone() for name, value in module.state_dict().items()}
        return self.strategy.configure_train(server_round, ArrayRecord(state), served, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        aggregated, metrics = self.strategy.aggregate_train(server_round, replies)  # the tap inside sees them
        if self.attacks_round(server_round):
            return None, metrics  # the modified model's aggregate is the attacker's, not a new global model
        return aggregated, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)


class LegacyMaliciousServer(_Modifier):
    """The same on Flower's legacy path (SecAgg+): the modified module's arrays as the FitIns parameters, the
    module itself in the FitIns config; the strategy's aggregate of an attacked round is not released. It
    keeps the SecAgg+ settings the config gives the server (``strategy.secagg``: clipping and quantisation
    ranges, recorded in every round's row)."""

    def __init__(self, strategy: Any, *args: Any, layout_of: Callable[[int, nn.Module], None], **kwargs: Any) -> None:
        super().__init__(strategy, *args, **kwargs)
        self.layout_of = layout_of

    def summed_vectors(self, server_round: int) -> int | None:
        return self.strategy.summed_vectors(server_round)

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list[tuple[Any, Any]]:
        if not self.attacks_round(server_round):
            return self.strategy.configure_fit(server_round, parameters, client_manager)
        names = list(self.architecture.state_dict())
        arrays = parameters_to_ndarrays(parameters)
        agreed = {
            name: torch.as_tensor(np.array(array)).reshape(self.architecture.state_dict()[name].shape)
            for name, array in zip(names, arrays, strict=True)
        }
        module = self.modified(agreed)
        self.on_round_model(server_round, copy.deepcopy(module))
        self.layout_of(server_round, module)
        payload = describe(module)
        state = [value.detach().cpu().numpy() for value in module.state_dict().values()]
        instructions = self.strategy.configure_fit(server_round, ndarrays_to_parameters(state), client_manager)
        for _, fit_ins in instructions:
            fit_ins.config = {**fit_ins.config, wire.SERVED_MODEL: payload}
        return instructions

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[Any, dict]:
        aggregated, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        if self.attacks_round(server_round):
            return None, metrics
        return aggregated, metrics
