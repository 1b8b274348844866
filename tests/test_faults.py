"""Faults that must not corrupt a run: non-finite numbers in the config, in a client's update, in the aggregate."""

import math

import pytest
import torch

from clients.client_app import check_finite
from clients.training import NonFiniteUpdateError
from fedsim.config import ConfigError, parse_config
from fedsim.engine.lifecycle.progress import LogProgress
from fedsim.engine.lifecycle.rounds import NON_FINITE_AGGREGATE, RoundResult, ServerSpec, run_rounds
from fedsim.rundir.writer import RunStore
from tiny_configs import tiny_config, tiny_raw


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"client": {"lr": math.inf}}, "client.lr = inf"),
        ({"client": {"lr": math.nan}}, "client.lr = nan"),
        ({"client": {"defenses": [{"name": "noise", "sigma": math.inf}]}}, "client.defenses[0].sigma = inf"),
        ({"federation": {"round_timeout": math.inf}}, "federation.round_timeout = inf"),  # a hang would never end
        ({"strategy": {"dp": {"noise_multiplier": math.nan}}}, "strategy.dp.noise_multiplier = nan"),
        ({"adversary": {"attacks": [{"name": "ig", "lr": math.inf}]}}, "adversary.attacks[0].lr = inf"),
    ],
)
def test_inf_and_nan_are_refused_in_one_line_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        parse_config(tiny_raw(**overrides))
    message = str(error.value)
    assert message.startswith(key) and "finite" in message and "\n" not in message


def test_a_client_update_with_nan_or_inf_is_refused_before_it_is_sent():
    check_finite({"w": torch.ones(3), "num_batches_tracked": torch.tensor(2)})
    with pytest.raises(NonFiniteUpdateError, match="2 of 4 values of 'w' are NaN or infinite"):
        check_finite({"b": torch.zeros(2), "w": torch.tensor([1.0, math.nan, math.inf, 0.0])})


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
    spec = ServerSpec(config, store, TwoClients(), initial, 0, lambda state: {"accuracy": 0.5}, LogProgress())
    run_rounds(spec, NonFiniteAggregate(), grid=None, context=None)
    evals = [row for row in store.rows() if row["event"] == "eval" and row["round"] > 0]
    assert [(row["model_updated"], row["error"]) for row in evals] == [(False, NON_FINITE_AGGREGATE)] * 2
    for server_round in (1, 2):
        assert torch.equal(store.load_checkpoint(server_round)["w"], initial["w"])


@pytest.mark.simulation
def test_a_run_whose_every_update_is_non_finite_fails_with_a_non_zero_exit_and_keeps_its_rows(tmp_path, capsys):
    import yaml

    from fedsim.cli import main

    config = tmp_path / "broken.yaml"
    raw = tiny_raw(client={"defenses": [{"name": "noise", "sigma": 1e39}]}, output={"dir": str(tmp_path), "run_name": "broken"})
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--quiet"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("fedsim: error: the run could not train: no round updated the global model")
    rows = RunStore(tmp_path / "broken").rows()
    fits = [row for row in rows if row["event"] == "fit"]
    assert fits and all(row["status"] == "failed" and "not finite" in row["error"] for row in fits)
    assert [row["model_updated"] for row in rows if row["event"] == "eval" and row["round"] > 0] == [False]
