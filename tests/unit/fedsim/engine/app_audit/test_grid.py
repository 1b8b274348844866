"""The audited app's grid: Flower's own FedAvg runs on it over an in-process federation; the taps see each client's
update and the aggregate, the scoring side learns who trained, and nothing the strategy gets differs."""

from __future__ import annotations

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from in_process_grid import InProcessGrid

from fedsim.core.errors import ConfigError
from fedsim.engine.app_audit.grid import AppGrid

FIRST_NODE = 500
EXAMPLES = {0: 3, 1: 5}  # samples each partition reports
GLOBAL = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(2)}
LAYOUT = {name: tuple(value.shape) for name, value in GLOBAL.items()}

client = ClientApp()


@client.train()
def train(message: Message, context: Context) -> Message:
    partition = context.node_config["partition-id"]
    state = message.content["arrays"].to_torch_state_dict()
    trained = {name: value + (partition + 1) * message.content["config"]["lr"] for name, value in state.items()}
    metrics = MetricRecord({"num-examples": EXAMPLES[partition], "loss": 1.0})
    return Message(RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics}), reply_to=message)


@client.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": 1, "eval_acc": 0.5})
    return Message(RecordDict({"metrics": metrics}), reply_to=message)


class Recorder:
    def __init__(self) -> None:
        self.updates: list = []
        self.trained: list[tuple[int, int]] = []
        self.done: list[tuple[int, dict[str, torch.Tensor] | None]] = []
        self.replies: list[tuple[int, str, int, dict]] = []


def audited_grid(tap: str, recorder: Recorder, wants=lambda server_round: True, layout=LAYOUT) -> AppGrid:
    return AppGrid(
        InProcessGrid(client, EXAMPLES, FIRST_NODE),
        recorder.updates.append,
        tap=tap,
        wants=wants,
        partition_of=lambda node: node - FIRST_NODE,
        layout=layout,
        trained_on=lambda server_round, report: recorder.trained.append((server_round, report.client)),
        round_done=lambda server_round, state: recorder.done.append((server_round, state)),
        replied=lambda *reply: recorder.replies.append(reply),
    )


def play(grid: Grid, rounds: int = 2, fraction_evaluate: float = 1.0) -> dict[str, torch.Tensor]:
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=fraction_evaluate, min_available_nodes=2)
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord(GLOBAL), train_config=ConfigRecord({"lr": 0.5}), num_rounds=rounds
    )
    if isinstance(grid, AppGrid):
        grid.finish()
    return result.arrays.to_torch_state_dict()


def fedavg(state: dict[str, torch.Tensor], rounds: int) -> dict[str, torch.Tensor]:
    """What FedAvg releases after ``rounds`` rounds of the client above: shifted by the weighted mean of (p+1)*lr."""
    shift = sum((p + 1) * 0.5 * n for p, n in EXAMPLES.items()) / sum(EXAMPLES.values())
    return {name: value + rounds * shift for name, value in state.items()}


@pytest.fixture(autouse=True)
def _identity(task_identity):
    """Flower stamps every message with the run's identity."""


def test_the_strategy_gets_the_same_model_through_the_audited_grid_as_without_it():
    recorder = Recorder()
    audited, plain = play(audited_grid("mitm", recorder)), play(InProcessGrid(client, EXAMPLES, FIRST_NODE))
    for name in GLOBAL:
        torch.testing.assert_close(audited[name], plain[name], rtol=0, atol=0)
        torch.testing.assert_close(audited[name], fedavg(GLOBAL, 2)[name])


def test_mitm_sees_each_clients_reply_against_the_model_it_was_sent():
    recorder = Recorder()
    play(audited_grid("mitm", recorder))
    seen = sorted(recorder.updates, key=lambda update: (update.round, update.source))
    assert [(u.round, u.source, u.tap) for u in seen] == [
        (1, "client:0", "mitm"),
        (1, "client:1", "mitm"),
        (2, "client:0", "mitm"),
        (2, "client:1", "mitm"),
    ]
    for update in seen:
        partition = int(update.source.split(":")[1])
        start = fedavg(GLOBAL, update.round - 1)
        assert update.num_examples == EXAMPLES[partition] and update.contributors == (partition,)
        for name in GLOBAL:
            torch.testing.assert_close(update.global_state[name], start[name])
            torch.testing.assert_close(update.observed_state[name], start[name] + (partition + 1) * 0.5)
    assert sorted(recorder.trained) == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_the_server_tap_sees_the_aggregate_each_round_released_and_who_is_behind_it():
    recorder = Recorder()
    play(audited_grid("server", recorder))
    aggregates = [u for u in recorder.updates if u.source == "aggregate"]
    assert [(u.round, u.contributors, u.num_examples) for u in aggregates] == [(1, (0, 1), 8), (2, (0, 1), 8)]
    for update in aggregates:
        for name in GLOBAL:
            torch.testing.assert_close(update.observed_state[name], fedavg(GLOBAL, update.round)[name])
    assert sum(u.source.startswith("client:") for u in recorder.updates) == 4  # the server holds the replies too


def test_each_round_ends_once_with_the_model_it_released():
    recorder = Recorder()
    play(audited_grid("mitm", recorder), rounds=3)
    assert [server_round for server_round, _ in recorder.done] == [1, 2, 3]
    for server_round, state in recorder.done:
        torch.testing.assert_close(state["w"], fedavg(GLOBAL, server_round)["w"])


def test_without_evaluation_the_last_rounds_release_is_not_seen_but_the_round_still_ends():
    recorder = Recorder()
    play(audited_grid("server", recorder), rounds=2, fraction_evaluate=0.0)
    assert [(r, state is not None) for r, state in recorder.done] == [(1, True), (2, False)]
    assert [u.round for u in recorder.updates if u.source == "aggregate"] == [1]


def test_rounds_nobody_attacks_are_not_copied_to_the_adversary():
    recorder = Recorder()
    play(audited_grid("server", recorder, wants=lambda server_round: server_round == 2))
    assert {u.round for u in recorder.updates} == {2}
    assert sorted(recorder.trained) == [(1, 0), (1, 1), (2, 0), (2, 1)]  # scoring still knows every round


def test_unnamed_arrays_of_the_legacy_api_are_read_by_the_models_layout():
    recorder = Recorder()
    play(audited_grid("mitm", recorder, layout={"weight": (2, 3), "bias": (2,)}))
    assert set(recorder.updates[0].observed_state) == {"weight", "bias"}


def test_a_declared_model_that_does_not_fit_the_apps_arrays_is_one_line_naming_model_target():
    with pytest.raises(ConfigError, match=r"^model.target: the app sends 2 arrays of shapes .*declare the app's own"):
        play(audited_grid("mitm", Recorder(), layout={"weight": (3, 3), "bias": (2,)}))


def test_each_clients_reported_numbers_become_its_fit_and_client_eval_rows():
    recorder = Recorder()
    play(audited_grid("mitm", recorder), rounds=1)
    assert sorted(recorder.replies, key=lambda reply: (reply[1], reply[2])) == [
        (1, "client_eval", 0, {"num_examples": 1, "eval_acc": 0.5}),
        (1, "client_eval", 1, {"num_examples": 1, "eval_acc": 0.5}),
        (1, "fit", 0, {"num_examples": 3, "loss": 1.0}),
        (1, "fit", 1, {"num_examples": 5, "loss": 1.0}),
    ]
