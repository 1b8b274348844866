"""The app's DP found where it acts: LocalDpMod's noise measured on the update it sent and checked against the epsilon
it states, Opacus' settings noted where the app makes its model private, Flower's DP wrappers read off the strategy;
the app trains as it would without the probe."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg
from in_process_grid import InProcessGrid

from fedsim.engine.app_audit.client_probe import LOCAL_DP, OPACUS, ProbedClientApp
from fedsim.engine.app_audit.dp import (
    as_defenses,
    epsilon_claims,
    gaussian_noise_std,
    local_dp_contradiction,
    mods_found,
    read_notes,
    refusal_line,
    strategy_found,
    supported_epsilon,
    unadapted_line,
)

FIRST_NODE = 700
EXAMPLES = {0: 4, 1: 4}
GLOBAL = {"w": torch.zeros(20, 10), "b": torch.zeros(10)}


@pytest.fixture(autouse=True)
def _identity(task_identity):
    """Flower stamps every message with the run's identity."""


def local_dp_app(sensitivity: float) -> ClientApp:
    app = ClientApp(mods=[LocalDpMod(clipping_norm=1.0, sensitivity=sensitivity, epsilon=10.0, delta=1e-5)])

    @app.train()
    def train(message: Message, context: Context) -> Message:
        state = message.content["arrays"].to_torch_state_dict()
        step = torch.Generator().manual_seed(context.node_config["partition-id"])
        trained = {name: value + 0.1 * torch.randn(value.shape, generator=step) for name, value in state.items()}
        metrics = MetricRecord({"num-examples": 4, "epsilon": 10.0})
        return Message(RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics}), reply_to=message)

    return app


def opacus_app() -> ClientApp:
    from opacus import PrivacyEngine

    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        partition = context.node_config["partition-id"]
        model = torch.nn.Linear(20, 10)
        state = message.content["arrays"].to_torch_state_dict()
        model.load_state_dict({"weight": state["w"].T, "bias": state["b"]})
        data = torch.utils.data.TensorDataset(torch.randn(8, 20), torch.randint(0, 10, (8,)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(data, batch_size=4)
        model, optimizer, loader = PrivacyEngine().make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=1.0 + 0.5 * partition,
            max_grad_norm=1.0,
        )
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        trained = {"w": model._module.weight.detach().T.clone(), "b": model._module.bias.detach().clone()}
        return Message(
            RecordDict({"arrays": ArrayRecord(trained), "metrics": MetricRecord({"num-examples": 8})}), reply_to=message
        )

    return app


def play(app, rounds: int = 1) -> dict[str, torch.Tensor]:
    np.random.seed(0)  # LocalDpMod draws its noise from NumPy's global generator
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2)
    grid = InProcessGrid(app, EXAMPLES, FIRST_NODE)
    result = strategy.start(grid, ArrayRecord(GLOBAL), rounds, train_config=ConfigRecord({"lr": 0.1}))
    return result.arrays.to_torch_state_dict()


def test_local_dp_noise_is_measured_on_the_update_and_a_sensitivity_below_the_clip_is_flagged(tmp_path):
    probed = play(ProbedClientApp(local_dp_app(sensitivity=1e-4), tmp_path))
    notes = read_notes(tmp_path)
    assert [(note["round"], note["client"], note["mechanism"]) for note in notes] == [
        (1, 0, LOCAL_DP),
        (1, 1, LOCAL_DP),
    ]
    stated = gaussian_noise_std(1e-4, 10.0, 1e-5)  # what LocalDpMod adds: 4.8e-05
    for note in notes:
        assert note["noise_std_measured"] == pytest.approx(stated, rel=0.05)
        assert note["coordinates"] == 210
    line = local_dp_contradiction(notes[0])
    assert line.startswith("LocalDpMod's claim contradicted: client 0, round 1: the noise measured on its update")
    supported = float(re.search(r"supports epsilon (\S+) at its clipping norm 1 ", line).group(1))
    assert supported == pytest.approx(1e5, rel=0.05) and "not the 10 it states" in line  # 10,000 times the claim
    plain = play(local_dp_app(sensitivity=1e-4))
    for name in GLOBAL:  # the probe drew no noise of its own: the same model, up to the order replies are summed in
        torch.testing.assert_close(probed[name], plain[name], rtol=0, atol=1e-7)


def test_local_dp_with_its_sensitivity_at_the_clip_is_not_flagged(tmp_path):
    play(ProbedClientApp(local_dp_app(sensitivity=1.0), tmp_path))
    note = read_notes(tmp_path)[0]
    assert supported_epsilon(1.0, note["noise_std_measured"], 1e-5) == pytest.approx(10.0, rel=0.05)
    assert local_dp_contradiction(note) is None


def test_opacus_noise_and_clip_are_noted_per_node(tmp_path):
    play(ProbedClientApp(opacus_app(), tmp_path))
    notes = read_notes(tmp_path)
    assert [(n["client"], n["mechanism"], n["noise_multiplier"], n["max_grad_norm"]) for n in notes] == [
        (0, OPACUS, 1.0, 1.0),
        (1, OPACUS, 1.5, 1.0),
    ]
    assert unadapted_line(notes, declared=[]) == (
        "warning: the app trains with DP the attacks did not know (dpsgd): their leakage is a lower bound; rerun with "
        "--set 'client.defenses=[{name: dpsgd, noise_multiplier: 1, max_grad_norm: 1}]' for the adapted attacks"
    )
    assert unadapted_line(notes, declared=["dpsgd"]) is None


def test_a_local_dp_mod_among_the_client_apps_mods_becomes_clip_and_noise_defenses():
    found = mods_found(local_dp_app(sensitivity=1e-4))
    assert as_defenses(found) == [
        {"name": "clip", "max_norm": 1.0},
        {"name": "noise", "sigma": pytest.approx(gaussian_noise_std(1e-4, 10.0, 1e-5))},
    ]
    assert mods_found(ClientApp()) == []


def test_flowers_central_dp_wrapper_is_read_off_the_strategy():
    wrapper = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(), noise_multiplier=0.8, clipping_norm=2.0, num_sampled_clients=2
    )
    assert strategy_found(wrapper) == {
        "mechanism": "DifferentialPrivacyServerSideFixedClipping",
        "clipping_at": "server",
        "noise_multiplier": 0.8,
        "clipping_norm": 2.0,
        "num_sampled_clients": 2,
    }
    assert strategy_found(FedAvg()) is None


def test_the_apps_epsilon_claims_are_read_per_client_from_its_fit_rows():
    rows = [
        {"round": 1, "event": "fit", "client": 0, "epsilon": 3.58, "train_loss": 2.0},
        {"round": 2, "event": "fit", "client": 0, "epsilon": 4.39},
        {"round": 2, "event": "fit", "client": 1, "target_epsilon": 2.0},
        {"round": 2, "event": "eval", "epsilon": 9.0},
    ]
    assert epsilon_claims(rows) == {0: {"epsilon": 4.39}, 1: {"target_epsilon": 2.0}}


def test_the_gaussian_mechanism_formula_inverts():
    sigma = gaussian_noise_std(1.0, 10.0, 1e-5)
    assert supported_epsilon(1.0, sigma, 1e-5) == pytest.approx(10.0)
    assert supported_epsilon(1.0, 0.0, 1e-5) == math.inf


def shuffled_batches(seed: int) -> list[list[int]]:
    data = torch.utils.data.TensorDataset(torch.arange(10))  # a sample's value is its index
    order = torch.Generator().manual_seed(seed)
    return [
        batch[0].tolist() for batch in torch.utils.data.DataLoader(data, batch_size=4, shuffle=True, generator=order)
    ]


def shuffling_app() -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        shuffled_batches(seed=context.node_config["partition-id"])  # a local epoch
        metrics = MetricRecord({"num-examples": 10})
        state = message.content["arrays"].to_torch_state_dict()
        return Message(RecordDict({"arrays": ArrayRecord(state), "metrics": metrics}), reply_to=message)

    return app


def test_each_local_step_is_noted_with_the_indices_its_loader_drew(tmp_path):
    from fedsim.engine.app_audit.notes import Notes

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2)
    grid = InProcessGrid(ProbedClientApp(shuffling_app(), tmp_path), EXAMPLES, FIRST_NODE)
    result = strategy.start(grid, ArrayRecord(GLOBAL), 1, train_config=ConfigRecord({"lr": 0.1}))
    notes = Notes(tmp_path)
    for client in (0, 1):
        assert notes.steps(1, client, dataset_size=10) == shuffled_batches(seed=client)  # in the order drawn
        assert notes.steps(1, client, dataset_size=11) is None  # another data set's draws are not this one's
    assert result.train_metrics_clientapp  # the app's own report is untouched
    replies = [call for call in notes.calls if call["message_type"] == "train"]
    assert len(replies) == 2 and all(call["findings"] == [] for call in replies)


def test_opacus_poisson_batches_are_noted_as_the_steps_drew_them(tmp_path):
    from fedsim.engine.app_audit.notes import Notes

    play(ProbedClientApp(opacus_app(), tmp_path))
    steps = Notes(tmp_path).steps(1, 0, dataset_size=8)
    assert steps is not None and all(0 <= index < 8 for step in steps for index in step)


def evaluating_local_dp_app() -> ClientApp:
    app = local_dp_app(sensitivity=1.0)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 4, "acc": 0.5})}), reply_to=message)

    return app


def evaluate_message() -> Message:
    message = Message(RecordDict({"arrays": ArrayRecord(GLOBAL), "config": ConfigRecord({})}), 700, "evaluate")
    message.metadata.__dict__["_message_id"] = "evaluate-1"  # as the grid numbers what it pushes
    return message


def test_local_dp_mods_refusal_of_an_evaluate_reply_reaches_the_server_instead_of_leaving_it_waiting(tmp_path):
    context = Context(run_id=1, node_id=700, node_config={"partition-id": 0}, state=RecordDict(), run_config={})
    unprobed = evaluating_local_dp_app()(evaluate_message(), context)
    assert unprobed.metadata.reply_to_message_id != "evaluate-1"  # Flower's: an answer to the app's own reply

    reply = ProbedClientApp(evaluating_local_dp_app(), tmp_path)(evaluate_message(), context)
    assert reply.has_error() and reply.metadata.reply_to_message_id == "evaluate-1"
    assert "LocalDpMod expects exactly one ArrayRecord" in reply.error.reason
    (row,) = read_notes(tmp_path)
    assert refusal_line(row).startswith("LocalDpMod refused the app's evaluate reply on client 0 (LocalDpMod expects")
