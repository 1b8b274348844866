"""The round loop: a non-finite aggregate is never committed."""

import math

import pytest
import torch
from tiny_configs import tiny_config

from fedsim.engine.assembly import server_settings_of
from fedsim.engine.lifecycle.progress import LogProgress
from fedsim.engine.lifecycle.rounds import NON_FINITE_AGGREGATE, RoundResult, ServerSpec, run_rounds
from fedsim.rundir.writer import RunStore


class NonFiniteAggregate:
    """A protocol whose round releases an aggregate with a NaN in it (a client that bypassed its own check)."""

    def start(self, grid, context, node_of_partition) -> None:
        pass

    def play_round(self, current) -> RoundResult:
        poisoned = {name: value + math.nan for name, value in current.state.items()}
        return RoundResult(poisoned, {"clients_ok": 2, "clients_failed": 0, "model_updated": True})


class TwoClients:
    def bind(self, node_of_partition) -> None:
        pass

    def sample_partitions(self, server_round, purpose="train"):
        return [0, 1]

    def round_metrics(self, server_round):
        return {}


def test_a_non_finite_aggregate_is_never_committed(tmp_path, monkeypatch):
    config = tiny_config(output={"dir": str(tmp_path), "run_name": "nan"}, federation={"rounds": 2})
    store = RunStore.create(config, "cpu")
    initial = {"w": torch.ones(2, 2)}
    monkeypatch.setattr("fedsim.engine.lifecycle.rounds.roll_call", lambda grid, count, timeout=None: {0: 10, 1: 11})
    spec = ServerSpec(
        server_settings_of(config), store, TwoClients(), initial, 0, lambda state: {"accuracy": 0.5}, LogProgress()
    )
    run_rounds(spec, NonFiniteAggregate(), grid=None, context=None)
    evals = [row for row in store.rows() if row["event"] == "eval" and row["round"] > 0]
    assert [(row["model_updated"], row["error"]) for row in evals] == [(False, NON_FINITE_AGGREGATE)] * 2
    for server_round in (1, 2):
        assert torch.equal(store.load_checkpoint(server_round)["w"], initial["w"])


class StoppedDuringTheRound:
    """A protocol whose second round ends after a stop was requested (the signal came while clients trained)."""

    def __init__(self, stop) -> None:
        self.stop = stop

    def start(self, grid, context, node_of_partition) -> None:
        pass

    def play_round(self, current) -> RoundResult:
        if current.number == 2:
            self.stop.request()
        return RoundResult({k: v + 1 for k, v in current.state.items()}, {"clients_ok": 2, "model_updated": True})


def test_a_round_that_ends_after_a_stop_request_is_not_committed(tmp_path, monkeypatch):
    from fedsim.core.stopping import StopRequested, StopSignal

    config = tiny_config(output={"dir": str(tmp_path), "run_name": "stopped"}, federation={"rounds": 3})
    store = RunStore.create(config, "cpu")
    monkeypatch.setattr("fedsim.engine.lifecycle.rounds.roll_call", lambda grid, count, timeout=None: {0: 10, 1: 11})
    stop = StopSignal()
    spec = ServerSpec(
        server_settings_of(config),
        store,
        TwoClients(),
        {"w": torch.ones(2)},
        0,
        lambda state: {"accuracy": 0.5},
        LogProgress(),
        stop=stop,
    )
    with pytest.raises(StopRequested):
        run_rounds(spec, StoppedDuringTheRound(stop), grid=None, context=None)
    assert store.last_committed_round() == 1
    assert [row["round"] for row in store.rows() if row["event"] == "eval"] == [0, 1]


def test_a_requested_stop_ends_the_wait_for_replies_at_the_next_pull(task_identity):
    from flwr.app import ConfigRecord, Message, RecordDict

    from fedsim.core.messaging import collect_replies
    from fedsim.core.stopping import StopRequested, StopSignal
    from fedsim.engine.lifecycle.rounds import StoppableGrid

    stop = StopSignal()
    message = Message(RecordDict({"config": ConfigRecord({"server-round": 1})}), dst_node_id=5, message_type="train")

    class SilentGrid:
        pulls = 0

        def push_messages(self, messages):
            return ["m5"]

        def pull_messages(self, ids):
            self.pulls += 1
            if self.pulls == 3:
                stop.request()  # as a signal handler would, while the server waits
            return []

    silent = SilentGrid()
    with pytest.raises(StopRequested):
        collect_replies(StoppableGrid(silent, stop), [message], timeout=None)  # no timeout: only the stop ends it
    assert silent.pulls == 3


class Improving:
    """A protocol whose rounds always update the model (a weight that counts the rounds played)."""

    def start(self, grid, context, node_of_partition) -> None:
        pass

    def play_round(self, current) -> RoundResult:
        return RoundResult({k: v + 1 for k, v in current.state.items()}, {"clients_ok": 2, "model_updated": True})


def accuracy_by_weight(accuracies):
    """An evaluator reading the round off the model (its weight) and scoring it ``accuracies[round]``."""
    return lambda state: {"accuracy": accuracies[int(state["w"][0]) - 1]}


@pytest.mark.parametrize("attacked, played", [(None, 4), ([6], 6)])
def test_training_stops_at_the_plateau_but_never_before_the_last_attacked_round(
    tmp_path, monkeypatch, attacked, played
):
    adversary = {"attacks": [{"name": "dlg"}], "rounds": attacked} if attacked else {}
    config = tiny_config(
        output={"dir": str(tmp_path), "run_name": f"plateau-{played}"},
        federation={"rounds": 10, "plateau": {"patience": 2, "min_delta": 0.01}},
        adversary=adversary,
    )
    store = RunStore.create(config, "cpu")
    monkeypatch.setattr("fedsim.engine.lifecycle.rounds.roll_call", lambda grid, count, timeout=None: {0: 10, 1: 11})
    accuracies = [0.1, 0.5, 0.9, 0.9, 0.905, 0.9, 0.9, 0.95, 0.99, 0.99, 0.99]  # flat from round 2 to 6
    spec = ServerSpec(
        server_settings_of(config),
        store,
        TwoClients(),
        {"w": torch.ones(1)},
        0,
        accuracy_by_weight(accuracies),
        LogProgress(),
    )
    run_rounds(spec, Improving(), grid=None, context=None)
    assert store.last_committed_round() == played
