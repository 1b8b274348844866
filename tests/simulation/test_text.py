"""A text federation under `fedsim run`: clients fine-tune a tiny GPT-2 on sentences the test writes, a wire tap
hands each update and the aggregate to DAGER, and the rows carry the text scores, the floor and the verdict."""

import json

import pytest
from text_corpus import write_corpus
from tiny_configs import tiny_config

from fedsim.engine.run import run_experiment
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.simulation


def test_dager_recovers_every_client_batch_and_the_aggregate_exactly_under_fedsim_run(tmp_path):
    config = tiny_config(
        name="text",
        data={"dataset": "text-files", "path": str(write_corpus(tmp_path)), "max_length": 8, "normalize": "none"},
        model={"name": "gpt2", "init": "default"},
        federation={"num_clients": 2, "rounds": 1},
        client={"lr": 0.1, "batch_size": 2, "local_steps": 1},
        adversary={"tap": "mitm", "targets": "both", "rounds": [1], "attacks": [{"name": "dager"}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    run_dir = run_experiment(config, quiet=True)
    rows = [row for row in RunStore(run_dir).rows() if row["event"] == "attack"]

    assert sorted(row["target"] for row in rows) == ["aggregate", "client:0", "client:1"]
    for row in rows:
        assert row["status"] == "ok" and row["modality"] == "text" and row["attack"] == "dager"
        assert row["exact_mean"] == 1.0 and row["token_accuracy_mean"] == 1.0 and row["rougeL_mean"] == 1.0
        assert row["floor_rougeL"] < 1.0 and row["p_value"] <= row["floor_level"] and row["verdict"] == "leaks"
        assert all(pair["original"] == pair["recovered"] for pair in row["texts"])
        json.dumps(row, allow_nan=False)
    assert {row["sequences"] for row in rows} == {2, 4}


def test_under_secagg_the_server_tells_dager_the_quantisation_noise_its_public_parameters_imply(tmp_path):
    config = tiny_config(
        name="text-secagg",
        data={"dataset": "text-files", "path": str(write_corpus(tmp_path)), "max_length": 8, "normalize": "none"},
        model={"name": "gpt2", "init": "default"},
        federation={"num_clients": 2, "rounds": 1},
        client={"lr": 0.1, "batch_size": 2, "local_steps": 1},
        strategy={"name": "secagg+"},
        adversary={"tap": "server", "targets": "aggregate", "rounds": [1], "attacks": [{"name": "dager"}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    run_dir = run_experiment(config, quiet=True)
    rows = RunStore(run_dir).rows()
    (attack,) = [row for row in rows if row["event"] == "attack"]
    (protocol,) = [row for row in rows if row["event"] == "eval" and "secagg_max_weight" in row]
    counts = [row["num_examples"] for row in rows if row["event"] == "fit"]

    # Flower's quantiser: each client's weight factor q_k = round(n_k / max_weight * L), rounding of
    # variance step^2 / 6 per client, the sum divided by sum q_k / L
    levels, clipping = protocol["secagg_quantization_range"], protocol["secagg_clipping_range"]
    factors = sum(round(count / protocol["secagg_max_weight"] * levels) for count in counts)
    expected = 2 * clipping / levels * (len(counts) / 6) ** 0.5 / (factors / levels)
    assert attack["status"] == "ok" and attack["tap"] == "server" and attack["target"] == "aggregate"
    assert attack["update_noise"] == pytest.approx(expected)
    assert attack["sequences"] == 4 and 0 <= attack["token_accuracy_mean"] <= 1
