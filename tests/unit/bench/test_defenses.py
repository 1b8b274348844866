"""bench.defenses' two phases: the leakage phase adds the utility phase's noise, and papers' settings map onto it."""

import numpy as np
import pytest

from bench.defenses import dpsgd_at_utility_noise, leakage_config, leakage_defenses
from bench.paper_results import on_lenet_fc
from clients.defenses.dpsgd import noise_for_budget
from fedsim.config import parse_config


def test_the_leakage_phase_runs_dpsgd_at_the_noise_its_epsilon_sets_over_the_utility_phases_rounds():
    defenses = [{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 1.0}, {"name": "noise", "sigma": 0.1}]
    leaked = dpsgd_at_utility_noise(defenses, sample_rate=0.01, steps=60)
    assert "target_epsilon" not in leaked[0] and leaked[0]["max_grad_norm"] == 1.0
    assert leaked[0]["noise_multiplier"] == pytest.approx(noise_for_budget(8, 1e-5, 0.01, 60, "rdp"))
    # one round's budget would have set less noise than the federation adds
    assert leaked[0]["noise_multiplier"] > noise_for_budget(8, 1e-5, 0.01, 1, "rdp")
    assert leaked[1] == defenses[1]


def test_leakage_defenses_take_the_sampling_rate_of_the_clients_partitions(tmp_path):
    federated = tmp_path / "federated.npz"
    np.savez(
        federated, x_train=np.zeros((6000, 28, 28)), y_train=np.zeros(6000), x_test=np.zeros(1), y_test=np.zeros(1)
    )
    settings = leakage_defenses(federated, {"dpsgd": [{"name": "dpsgd", "target_epsilon": 1, "max_grad_norm": 1.0}]})
    # configs/defense-evaluation.yaml: 10 clients, batches of 64, at most 200 rounds of one step
    assert settings["dpsgd"][0]["noise_multiplier"] == pytest.approx(noise_for_budget(1, 1e-5, 64 / 600, 200, "rdp"))


def test_the_leakage_phases_attack_one_round_of_2_image_gradients_from_the_model_they_are_given(tmp_path):
    federated = tmp_path / "federated.npz"
    np.savez(
        federated, x_train=np.zeros((6000, 28, 28)), y_train=np.zeros(6000), x_test=np.zeros(1), y_test=np.zeros(1)
    )
    settings = {"none": [], "dpsgd": [{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 1.0}]}
    (tmp_path / "round_0094.pt").touch()  # the undefended utility run's last model (its contents are not read here)
    early = leakage_config(federated, settings, checkpoint=None)
    trained = leakage_config(federated, settings, checkpoint=tmp_path / "round_0094.pt")
    for raw in (early, trained):
        config = parse_config({key: value for key, value in raw.items() if key != "sweep"})
        assert config.client.batch_size == 2 and config.client.local_steps == 1
        assert config.federation.rounds == 1 and config.federation.plateau is None
        assert config.adversary.rounds == [1] and config.adversary.clients == [0, 1]
        assert raw["sweep"]["grid"]["client.defenses"] == leakage_defenses(federated, settings)
    assert parse_config({k: v for k, v in early.items() if k != "sweep"}).model.checkpoint is None
    assert trained["model"]["checkpoint"] == str(tmp_path / "round_0094.pt")


def test_a_papers_soteria_without_a_layer_is_the_representation_layer_of_lenet_fc():
    assert on_lenet_fc([{"name": "soteria", "ratio": 0.8}]) == [
        {"name": "soteria", "ratio": 0.8, "layer": "representation"}
    ]
    assert on_lenet_fc([{"name": "soteria", "ratio": 0.8, "layer": "classifier"}])[0]["layer"] == "classifier"
