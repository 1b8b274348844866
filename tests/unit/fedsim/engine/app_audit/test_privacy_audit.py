"""The privacy audit of an app: canary examples enter its training through its own data function in train calls only,
each node's canaries are scored from its updates as sent, and a node's bound above the app's claim is one loud line."""

from __future__ import annotations

import sys
import textwrap
import types

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg
from in_process_grid import InProcessGrid

from adversary.privacy_audit.canaries import CanaryExamples
from adversary.privacy_audit.config import AuditConfig
from adversary.privacy_audit.scores import update_loss_scores
from fedsim.engine.app_audit.client_probe import CANARIES_ENTERED, OPACUS, OPACUS_SPENT, ProbedClientApp
from fedsim.engine.app_audit.data_canaries import DataCanaries
from fedsim.engine.app_audit.dp import read_notes
from fedsim.engine.app_audit.notes import Notes
from fedsim.engine.app_audit.privacy_audit import AppPrivacyAudit, finish_audit

PACKAGE = "fedsim_canary_probe_app"
TASK = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __init__(self, count):
            self.count = count
        def __len__(self):
            return self.count
        def __getitem__(self, index):
            return {"img": torch.full((1, 2, 2), float(index)), "label": index % 3, "id": index}

    def load_data(partition_id, batch_size=4):
        return DataLoader(Images(6 + partition_id), batch_size=batch_size, shuffle=True), DataLoader(Images(2))
    """
)
CLIENT = textwrap.dedent(
    f"""
    from {PACKAGE}.task import load_data  # a second name for the data function, as apps import it

    def seen(partition_id):
        train, test = load_data(partition_id)
        images = [batch["img"] for batch in train]
        return len(train.dataset), float(sum(image.sum() for image in images)), len(test.dataset)
    """
)


@pytest.fixture()
def app_modules():
    """An app's task module and a client module that imported its data function under its own name."""
    package = types.ModuleType(PACKAGE)
    package.__path__ = []
    task, client = types.ModuleType(f"{PACKAGE}.task"), types.ModuleType(f"{PACKAGE}.client_app")
    sys.modules.update({PACKAGE: package, task.__name__: task, client.__name__: client})
    exec(TASK, task.__dict__)
    exec(CLIENT, client.__dict__)
    yield task, client
    for name in (PACKAGE, task.__name__, client.__name__):
        sys.modules.pop(name)


@pytest.fixture(autouse=True)
def _identity(task_identity):
    """Flower stamps every message with the run's identity."""


def reporting_app(client_module) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        size, pixel_sum, test_size = client_module.seen(context.node_config["partition-id"])
        metrics = MetricRecord({"num-examples": size, "pixel_sum": pixel_sum, "test_size": test_size})
        state = message.content["arrays"].to_torch_state_dict()
        return Message(RecordDict({"arrays": ArrayRecord(state), "metrics": metrics}), reply_to=message)

    return app


def canary_plan(count: int = 2) -> DataCanaries:
    image = torch.full((count, 1, 2, 2), 100.0)
    return DataCanaries(
        f"{PACKAGE}.task:load_data", 0, "img", "label", {1: (image, torch.zeros(count, dtype=torch.long))}
    )


def test_canaries_join_the_training_loader_of_their_node_only_and_only_while_it_trains(app_modules, tmp_path):
    _, client = app_modules
    replies = []

    class Recording(FedAvg):
        def aggregate_train(self, server_round, replies_of_round):
            replies.extend(reply.content["metrics"] for reply in replies_of_round)
            return super().aggregate_train(server_round, replies_of_round)

    grid = InProcessGrid(ProbedClientApp(reporting_app(client), tmp_path, canary_plan()), {0: 6, 1: 7}, 700)
    state = ArrayRecord({"w": torch.zeros(2)})
    Recording(fraction_evaluate=0.0, min_available_nodes=2).start(grid, state, 1, train_config=ConfigRecord({}))

    by_size = sorted((int(m["num-examples"]), float(m["pixel_sum"]), int(m["test_size"])) for m in replies)
    assert by_size == [(6, 4 * sum(range(6)), 2), (9, 4 * sum(range(7)) + 2 * 400.0, 2)]  # node 1: 7 + 2 canaries
    entered = [row for row in read_notes(tmp_path) if row["mechanism"] == CANARIES_ENTERED]
    assert [(row["client"], row["added"]) for row in entered] == [(1, 2)]  # node 0 has no canaries in this plan
    steps = Notes(tmp_path).steps(1, 1, 7)
    assert sorted(i for batch in steps for i in batch) == list(range(7))  # its own samples; the canaries are not
    assert client.seen(1)[0] == 7  # outside a probed train call: the app's own data


def test_an_update_that_learned_a_canary_scores_it_above_one_it_never_saw():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x, y = torch.eye(4)[:2], torch.tensor([2, 0])
    before = {name: value.detach().clone() for name, value in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(5):  # trains on the first canary alone
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[:1]), y[:1]).backward()
        optimizer.step()
    after = {name: value.detach().clone() for name, value in model.state_dict().items()}
    scores = update_loss_scores(torch.nn.Linear(4, 3), before, after, x, y)
    # the update lowered the learned canary's loss and raised the other's (its label's logit lost the bias)
    assert scores[0] > 0.5 > 0 > scores[1]


ENTERED = {"round": 1, "client": 0, "mechanism": CANARIES_ENTERED, "data_function_calls": 1, "added": 200}


def separated_audit(canaries: int = 400) -> AppPrivacyAudit:
    """Node 0's scores separate its included canaries perfectly (a mechanism hiding nothing)."""
    plan = CanaryExamples.draw(torch.zeros(canaries, 1, 2, 2), torch.zeros(canaries), canaries, 3, seed=1)
    audit = AppPrivacyAudit(AuditConfig(canaries=canaries), torch.nn.Linear(4, 3), {0: plan}, canary_plan())
    audit.scores[0] = plan.included + np.random.default_rng(0).normal(0, 0.01, canaries)
    audit.updates[0] = 1
    return audit


@pytest.mark.parametrize(("claimed", "contradicted"), [(0.5, True), (50.0, False)])
def test_a_nodes_bound_above_the_apps_claim_is_one_loud_line(fedsim_log, claimed, contradicted):
    dp_rows = [
        ENTERED,
        {"round": 1, "client": 0, "mechanism": OPACUS, "noise_multiplier": 1.0},
        {"round": 1, "client": 0, "mechanism": OPACUS_SPENT, "epsilon": claimed, "delta": 1e-5, "accountant_steps": 3},
    ]
    (fields,) = finish_audit(separated_audit(), dp_rows, {0: 6})
    assert fields["client"] == 0 and fields["epsilon_example"] == claimed and fields["audit_delta"] == 1e-5
    assert fields["audit_epsilon_lower"] > 1.0
    said = [record.getMessage() for record in fedsim_log.records]
    assert any(
        line.startswith("privacy audit, node 0 (example level") and "over 3 of the 6 DP-SGD steps" in line
        for line in said
    )
    loud = [line for line in said if line.startswith("the app's epsilon claim for node 0 is contradicted")]
    assert len(loud) == (1 if contradicted else 0)


def test_a_node_whose_updates_were_never_seen_in_clear_gets_no_bound(fedsim_log):
    audit = separated_audit()
    audit.updates[0] = 0
    assert finish_audit(audit, [ENTERED], {}) == []
    assert "privacy audit, node 0: none of its updates was seen in clear" in fedsim_log.text


def test_a_node_whose_training_never_took_its_canaries_gets_no_bound(fedsim_log):
    missed = {**ENTERED, "data_function_calls": 0, "added": 0}  # the app read its data through another function
    assert finish_audit(separated_audit(), [missed], {}) == []
    assert "privacy audit, node 0: no canary entered its training (its train calls never called" in fedsim_log.text
