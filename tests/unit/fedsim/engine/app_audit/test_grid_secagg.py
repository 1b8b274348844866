"""The audited app's grid under an app's own SecAgg+ workflow (legacy NumPyClient / Strategy API), run for real
in-process: the server position attacks the clear aggregate, the wire sees masked vectors only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from in_process_grid import InProcessGrid

from fedsim.engine.app_audit.grid import AppGrid

pytestmark = pytest.mark.usefixtures("task_identity")

FIRST_NODE = 700
CLIENTS = 3
GLOBAL = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "b": np.zeros(3, np.float32)}
LAYOUT = {name: value.shape for name, value in GLOBAL.items()}


def examples_of(partition: int) -> int:
    return 4 + partition


def update_of(partition: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(partition)
    return {name: (0.1 * rng.standard_normal(value.shape)).astype(np.float32) for name, value in GLOBAL.items()}


class ShiftingClient(NumPyClient):
    def __init__(self, partition: int) -> None:
        self.partition = partition

    def fit(self, parameters, config):
        update = update_of(self.partition)
        return [p + update[name] for name, p in zip(GLOBAL, parameters)], examples_of(self.partition), {}


client_app = ClientApp(
    client_fn=lambda context: ShiftingClient(int(context.node_config["partition-id"])).to_client(),
    mods=[secaggplus_mod],
)


def play(tap: str, rounds: int = 1):
    updates, trained, done = [], [], []
    grid = AppGrid(
        InProcessGrid(client_app, range(CLIENTS), FIRST_NODE),
        updates.append,
        tap=tap,
        wants=lambda server_round: True,
        partition_of=lambda node: node - FIRST_NODE,
        layout=LAYOUT,
        trained_on=lambda server_round, report: trained.append((server_round, report.client)),
        round_done=lambda server_round, state: done.append((server_round, state)),
    )
    strategy = FedAvg(
        fraction_fit=1.0, fraction_evaluate=0.0, initial_parameters=ndarrays_to_parameters(list(GLOBAL.values()))
    )
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares=3, reconstruction_threshold=2))(grid, legacy)
    grid.finish(legacy.state.array_records.get("parameters"))
    return updates, trained, done


def fedavg() -> dict[str, np.ndarray]:
    total = sum(examples_of(p) for p in range(CLIENTS))
    return {
        name: value + sum(examples_of(p) * update_of(p)[name] for p in range(CLIENTS)) / total
        for name, value in GLOBAL.items()
    }


def test_the_server_position_attacks_the_clear_aggregate_of_every_contributor():
    updates, trained, done = play("server")
    aggregate = [u for u in updates if u.source == "aggregate"]
    assert len(aggregate) == 1 and aggregate[0].contributors == (0, 1, 2)
    assert aggregate[0].num_examples == sum(examples_of(p) for p in range(CLIENTS))
    for name, expected in fedavg().items():  # SecAgg+ quantises: equal up to its rounding
        np.testing.assert_allclose(aggregate[0].observed_state[name].numpy(), expected, atol=1e-3)
        np.testing.assert_allclose(aggregate[0].global_state[name].numpy(), GLOBAL[name])
    assert sorted(trained) == [(1, 0), (1, 1), (1, 2)]
    assert [server_round for server_round, state in done] == [1] and done[0][1] is not None


def test_on_the_wire_each_client_is_a_masked_vector_not_its_update():
    updates, _, _ = play("mitm")
    clients = sorted((u for u in updates if u.source != "aggregate"), key=lambda u: u.source)
    assert [u.source for u in clients] == ["client:0", "client:1", "client:2"]
    for update in clients:
        partition = int(update.source.split(":")[1])
        true_update = GLOBAL["w"] + update_of(partition)["w"]
        assert update.num_examples == examples_of(partition)  # SecAgg+ sends the count in clear
        assert np.abs(update.observed_state["w"].numpy() - true_update).mean() > 0.1  # masked: noise, not the update
    assert not any(u.source == "aggregate" for u in updates)  # the wire never carries the aggregate in this app


def test_the_grid_sees_the_model_each_round_starts_from():
    updates, _, done = play("server", rounds=2)
    second = [u for u in updates if u.source == "aggregate" and u.round == 2]
    assert len(second) == 1
    torch.testing.assert_close(second[0].global_state["w"], done[0][1]["w"])
