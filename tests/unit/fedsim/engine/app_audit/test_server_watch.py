"""The app's server-side numbers: its central evaluation and its strategy's aggregates reach the run per round, and
the strategy returns what it would without the watch."""

from __future__ import annotations

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp.strategy import FedAvg, Strategy
from in_process_grid import InProcessGrid

from fedsim.engine.app_audit.metrics import AppMetrics
from fedsim.engine.app_audit.server_watch import watching_strategies
from tests.unit.fedsim.engine.app_audit.test_grid import EXAMPLES, FIRST_NODE, GLOBAL, client


@pytest.fixture(autouse=True)
def _identity(task_identity):
    """Flower stamps every message with the run's identity."""


def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    return MetricRecord({"accuracy": 0.1 * server_round, "loss": float(arrays["b"].numpy().sum())})


def play(rounds: int = 2) -> dict[str, torch.Tensor]:
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_available_nodes=2)
    result = strategy.start(
        InProcessGrid(client, EXAMPLES, FIRST_NODE),
        ArrayRecord(GLOBAL),
        rounds,
        train_config=ConfigRecord({"lr": 0.5}),
        evaluate_fn=central,
    )
    return result.arrays.to_torch_state_dict()


def test_the_apps_central_federated_and_train_numbers_are_recorded_per_round():
    metrics, seen = AppMetrics(), []
    with watching_strategies(metrics.record, seen.append):
        play()
    assert [type(strategy).__name__ for strategy in seen] == [FedAvg.__name__]
    assert metrics.of(0) == {"app_central_accuracy": 0.0, "app_central_loss": 0.0}
    second = metrics.of(2)
    assert second["app_central_accuracy"] == pytest.approx(0.2)
    assert second["app_federated_eval_acc"] == 0.5
    assert second["app_train_loss"] == 1.0
    assert [server_round for server_round, _ in metrics.before(3)] == [1]  # rounds 0 and 2 were taken


def test_the_watch_changes_nothing_the_strategy_returns_and_leaves_flower_as_it_was():
    start = Strategy.start
    with watching_strategies(AppMetrics().record):
        watched = play()
    plain = play()
    assert Strategy.start is start
    for name in GLOBAL:
        torch.testing.assert_close(watched[name], plain[name], rtol=0, atol=1e-6)  # up to the order replies sum in
