"""The privacy a run spent: example-level (DP-SGD) and client-level (central DP) epsilons, never merged."""

import json
import math

import pytest
from tiny_configs import tiny_config

import fedsim
from fedsim.engine.lifecycle.summary import summarize
from fedsim.rundir.privacy import epsilon_text, privacy_by_round, privacy_spent
from fedsim.rundir.writer import RunStore


def fit(server_round: int, client: int, epsilon: float, delta: float = 1e-5) -> dict:
    return {
        "round": server_round,
        "event": "fit",
        "client": client,
        "defense.dpsgd.epsilon": epsilon,
        "defense.dpsgd.delta": delta,
    }


def test_example_level_is_the_largest_clients_and_does_not_drop_when_that_client_sits_a_round_out():
    rows = [fit(1, 0, 1.0), fit(1, 1, 2.0), fit(2, 0, 1.5)]  # client 1 (at 2.0) does not train in round 2
    spent = privacy_by_round(rows)
    assert spent[1]["epsilon_example"] == 2.0 and spent[2]["epsilon_example"] == 2.0
    assert spent[2]["delta_example"] == 1e-5 and spent[2]["epsilon_client"] is None


def test_client_level_comes_from_the_servers_eval_rows_beside_example_level():
    rows = [
        {"round": 0, "event": "eval", "accuracy": 0.1},
        {"round": 1, "event": "eval", "dp_epsilon": 0.7, "dp_delta": 1e-3},
        fit(1, 0, 4.0),
        {"round": 2, "event": "eval", "dp_epsilon": math.inf, "dp_delta": 1e-3},  # a noiseless release
    ]
    spent = privacy_spent(rows)
    assert spent == {"epsilon_example": 4.0, "delta_example": 1e-5, "epsilon_client": math.inf, "delta_client": 1e-3}
    assert 0 not in privacy_by_round(rows)  # nothing spent before training


def test_epsilon_without_poisson_batches_and_empty_cells_are_not_a_guarantee():
    rows = [
        {"round": 1, "event": "fit", "defense.dpsgd.epsilon_if_poisson": 3.0, "defense.dpsgd.delta": 1e-5},
        {"round": 1, "event": "fit", "defense.dpsgd.epsilon": float("nan")},  # a DataFrame's empty cell
        {"round": 1, "event": "eval", "dp_epsilon": None},
    ]
    assert privacy_by_round(rows) == {}
    assert privacy_spent(rows) == dict.fromkeys(("epsilon_example", "delta_example", "epsilon_client", "delta_client"))


def test_epsilon_text_names_the_delta_and_infinity():
    assert epsilon_text(3.214, 1e-5) == "3.21 (δ=1e-05)"
    assert epsilon_text(math.inf, 1e-3) == "inf (δ=1e-03)"
    assert epsilon_text(None, None) == "-"


def test_summary_json_and_load_run_carry_both_epsilons(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "dp"}), "cpu")
    for server_round in (0, 1, 2):
        central = {"dp_epsilon": 0.25 * server_round, "dp_delta": 1e-3} if server_round else {}
        store.append({"round": server_round, "event": "eval", "accuracy": 0.5, "loss": 1.0, **central})
        if server_round:
            store.append(fit(server_round, 0, 2.0 * server_round))
    summary = summarize(store, 1.0)
    assert (summary["epsilon_example"], summary["delta_example"]) == (4.0, 1e-5)
    assert (summary["epsilon_client"], summary["delta_client"]) == (0.5, 1e-3)
    store.write_json("summary.json", summary)
    run = fedsim.load_run(store.run_dir)
    assert json.loads((store.run_dir / "summary.json").read_text())["epsilon_client"] == 0.5
    assert run.summary["epsilon_example"] == 4.0
    privacy = run.privacy()
    assert privacy["round"].tolist() == [1, 2]
    assert privacy["epsilon_example"].tolist() == [2.0, 4.0] and privacy["epsilon_client"].tolist() == [0.25, 0.5]
    assert privacy["delta_client"].tolist() == pytest.approx([1e-3, 1e-3])


def test_a_run_without_dp_has_no_epsilon_but_says_so(tmp_path):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "plain"}), "cpu")
    store.append({"round": 0, "event": "eval", "accuracy": 0.1, "loss": 2.0})
    summary = summarize(store, 1.0)
    assert summary["epsilon_example"] is None and summary["epsilon_client"] is None
    privacy = fedsim.load_run(store.run_dir).privacy()
    assert privacy.empty and list(privacy.columns) == [
        "round",
        "epsilon_example",
        "delta_example",
        "epsilon_client",
        "delta_client",
    ]
