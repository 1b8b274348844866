"""Before the audit's run, a dry call of the app's first round finds the DP each node sets up inside its training
(Opacus' make_private), so that the attacks adapt to it: no step trains, the random state and the working directory
are as they were, and where nodes differ the attacks know the least noise of any node."""

from __future__ import annotations

import os

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedsim.config import parse_config
from fedsim.engine.app_audit.client_probe import OPACUS
from fedsim.engine.app_audit.dp_watch import adapted_line, dry_probe_line, with_found_defenses
from fedsim.engine.app_audit.dry_probe import dry_probe

GLOBAL = {"w": torch.zeros(20, 10), "b": torch.zeros(10)}


def opacus_client(stepped: list[int]) -> ClientApp:
    """Noise 1.0 on node 0 and 1.5 on node 1, as Flower's Opacus example; ``stepped`` counts the steps it trains."""
    from opacus import PrivacyEngine

    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        partition = context.node_config["partition-id"]
        model = torch.nn.Linear(20, 10)
        data = torch.utils.data.TensorDataset(torch.randn(8, 20), torch.randint(0, 10, (8,)))
        optimizer = torch.optim.SGD(model.parameters(), lr=message.content["config"]["lr"])
        loader = torch.utils.data.DataLoader(data, batch_size=4)
        model, optimizer, loader = PrivacyEngine().make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=1.0 + 0.5 * partition,
            max_grad_norm=1.0,
        )
        for x, y in loader:
            stepped.append(partition)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        metrics = MetricRecord({"num-examples": 8})
        return Message(RecordDict({"arrays": message.content["arrays"], "metrics": metrics}), reply_to=message)

    return app


def fedavg_server(evaluated: list[int]) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.rand(3)  # the server draws from torch's generator, as building a model does
        FedAvg(fraction_evaluate=0.0, min_available_nodes=2).start(
            grid,
            ArrayRecord(GLOBAL),
            num_rounds=3,
            train_config=ConfigRecord({"lr": 0.1}),
            evaluate_fn=lambda server_round, arrays: evaluated.append(server_round),
        )

    return app


def test_the_dry_call_finds_each_nodes_opacus_settings_before_any_step_trains():
    stepped: list[int] = []
    evaluated: list[int] = []
    before = torch.get_rng_state()
    folder = os.getcwd()
    probe = dry_probe(fedavg_server(evaluated), opacus_client(stepped), 2, {"seed": 1})

    assert probe.unfinished is None
    found = {client: [(f["mechanism"], f["noise_multiplier"]) for f in fs] for client, fs in probe.findings.items()}
    assert found == {0: [(OPACUS, 1.0)], 1: [(OPACUS, 1.5)]}
    assert stepped == []  # each call ended at its first batch
    assert evaluated == [0]  # the server's evaluation of its initial model, then round 1's train messages: stopped
    assert torch.equal(torch.get_rng_state(), before) and os.getcwd() == folder


def test_the_attacks_adapt_to_the_least_noise_of_any_node_and_say_so():
    probe = dry_probe(fedavg_server([]), opacus_client([]), 2, {})
    attacks = {"attacks": [{"name": "ig-dpsgd", "iterations": 5}], "portfolio": "listed"}
    config, added = with_found_defenses(parse_config({"adversary": attacks}), ClientApp(), probe)

    defenses = [defense.model_dump() for defense in config.client.defenses]
    assert [(d["name"], d["noise_multiplier"], d["max_grad_norm"]) for d in defenses] == [("dpsgd", 1.0, 1.0)]
    assert added[0]["nodes"] == {"0": 1.0, "1": 1.5}
    # the attack's options stay as the config set them: what it adapts (clip, noise, loss) is left to the defense
    assert config.adversary.attacks[0].model_fields_set == {"name", "iterations"}
    assert adapted_line(added[0]) == (
        "the attacks adapt to client defense dpsgd (noise_multiplier 1, max_grad_norm 1), found before the run by a "
        "dry call of the app's first round; the nodes' noise: node 0 1, node 1 1.5 (the attacks know the least: the "
        "node most exposed)"
    )
    declared = parse_config({"client": {"defenses": [{"name": "dpsgd", "noise_multiplier": 2.0}]}})
    kept, none_added = with_found_defenses(declared, ClientApp(), probe)
    assert none_added == [] and kept.client.defenses[0].noise_multiplier == 2.0  # what the config declares stays


def test_a_server_that_fails_before_training_leaves_the_dp_to_be_found_as_the_nodes_train():
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        raise FileNotFoundError("central.parquet")

    probe = dry_probe(app, opacus_client([]), 2, {})
    assert probe.findings == {}
    assert dry_probe_line(probe) == (
        "the dry call of the app's first round ended before it saw the nodes' training (the app's server failed "
        "before its first training: FileNotFoundError: central.parquet): DP set up inside their training is found "
        "as they train, and the attacks do not know it"
    )


@pytest.mark.parametrize("content", [RecordDict(), RecordDict({"config": ConfigRecord({"stage": "setup"})})])
def test_first_train_messages_without_a_model_end_the_dry_call(content):
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        messages = [Message(content, dst_node_id=node, message_type="train") for node in grid.get_node_ids()]
        grid.send_and_receive(messages)
        raise AssertionError("never reached: the dry call ends at the first train messages")

    probe = dry_probe(app, opacus_client([]), 2, {})
    assert probe.findings == {} and "carry no model" in str(probe.unfinished)


def test_flowers_legacy_server_loop_is_not_called_dry():
    from flwr.server import ServerAppComponents
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    called: list[int] = []

    def server_fn(context: Context) -> ServerAppComponents:
        called.append(1)
        return ServerAppComponents(strategy=LegacyFedAvg())

    probe = dry_probe(ServerApp(server_fn=server_fn), opacus_client([]), 2, {})
    assert called == [] and probe.findings == {} and "legacy server loop" in str(probe.unfinished)
