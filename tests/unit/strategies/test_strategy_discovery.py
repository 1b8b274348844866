"""A new strategy is one new file in strategies/: the package finds it and it registers."""

import torch
from flwr.app import ArrayRecord, ConfigRecord

from fedsim.config import FederationConfig
from strategies import STRATEGIES, build_strategy
from strategies.base import MessageStrategy
from tests.helpers.central_dp import reply
from tests.helpers.discovery import package_with_new_module

FEDMEDIAN = '''
"""``fedmedian``: the coordinate-wise median of the client models (Yin et al. 2018), FedAvg's sampling."""

import torch
from flwr.app import ArrayRecord

import fedsim.core.wire as wire
from strategies.fedavg import FedAvg, partition_of
from strategies.registry import STRATEGIES


@STRATEGIES.register("fedmedian", help="coordinate-wise median of the client models (Yin et al. 2018)")
class FedMedian(FedAvg):
    def aggregate_train(self, server_round, replies):
        ordered = sorted((r for r in replies if not r.has_error()), key=partition_of)
        if len(ordered) < self.min_train_nodes:
            return None, None
        states = [reply.content[wire.ARRAYS].to_torch_state_dict() for reply in ordered]
        median = {name: torch.stack([s[name] for s in states]).median(dim=0).values for name in states[0]}
        return ArrayRecord(median), None
'''


def test_a_new_file_in_the_strategies_package_registers_its_strategy(tmp_path, task_identity):
    assert "fedmedian" not in STRATEGIES
    with package_with_new_module(
        "strategies", "fedmedian", FEDMEDIAN, tmp_path / "strategies", STRATEGIES, "fedmedian"
    ):
        strategy = build_strategy("fedmedian", FederationConfig(num_clients=3, fraction_fit=1.0), seed=0)
        assert isinstance(strategy, MessageStrategy)
        strategy.bind({partition: 100 + partition for partition in range(3)})
        sent = list(strategy.configure_train(1, ArrayRecord({"w": torch.zeros(2)}), ConfigRecord(), grid=None))
        values = [torch.tensor([1.0, -5.0]), torch.tensor([2.0, 0.0]), torch.tensor([9.0, 1.0])]
        replies = [
            reply(message, {"w": value}, partition) for partition, (message, value) in enumerate(zip(sent, values))
        ]
        aggregated, _ = strategy.aggregate_train(1, replies)
        assert torch.equal(aggregated.to_torch_state_dict()["w"], torch.tensor([2.0, 0.0]))
    assert "fedmedian" not in STRATEGIES
