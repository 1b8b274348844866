"""bench.defenses' two phases: the leakage phase adds the utility phase's noise, and papers' settings map onto it."""

import numpy as np
import pytest

from bench.defenses import dpsgd_at_utility_noise, leakage_defenses
from bench.paper_results import on_lenet_fc
from clients.defenses.dpsgd import noise_for_budget


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
        federated, x_train=np.zeros((2000, 28, 28)), y_train=np.zeros(2000), x_test=np.zeros(1), y_test=np.zeros(1)
    )
    settings = leakage_defenses(federated, {"dpsgd": [{"name": "dpsgd", "target_epsilon": 1, "max_grad_norm": 1.0}]})
    # configs/defense-evaluation.yaml: 10 clients, batches of 2, 60 rounds of one step
    assert settings["dpsgd"][0]["noise_multiplier"] == pytest.approx(noise_for_budget(1, 1e-5, 2 / 200, 60, "rdp"))


def test_a_papers_soteria_without_a_layer_is_the_representation_layer_of_lenet_fc():
    assert on_lenet_fc([{"name": "soteria", "ratio": 0.8}]) == [
        {"name": "soteria", "ratio": 0.8, "layer": "representation"}
    ]
    assert on_lenet_fc([{"name": "soteria", "ratio": 0.8, "layer": "classifier"}])[0]["layer"] == "classifier"
