"""bench.defenses: leakage is measured on the models each defended run sent, DP-SGD at its utility-phase noise, and
papers' settings map onto the table's."""

import math
from pathlib import Path

import pytest
import torch
from scipy.stats import binom

from bench.defenses import (
    FINAL_EVALUATIONS,
    leakage_client,
    leakage_config,
    noise_multiplier,
    round_sent,
    sent_model,
)
from bench.dpsgd_tuning import Federation, train
from bench.paper_results import on_lenet_fc, setting_of
from clients.defenses.dpsgd import noise_for_budget
from fedsim.config import parse_config
from fedsim.rundir.layout import CHECKPOINT_DIR, checkpoint_file


class FinishedRun:
    def __init__(self, path: Path):
        self.path = path


def test_round_1_sends_the_public_model_and_a_later_round_what_the_defended_run_ended_the_round_before_with(tmp_path):
    run = FinishedRun(tmp_path / "run")
    (run.path / CHECKPOINT_DIR).mkdir(parents=True)
    (run.path / CHECKPOINT_DIR / checkpoint_file(74)).touch()
    assert sent_model(tmp_path, run, 1) == tmp_path / "pretrained.pt"
    assert sent_model(tmp_path, run, 75) == run.path / CHECKPOINT_DIR / checkpoint_file(74)
    assert sent_model(tmp_path, run, 150) is None  # that run has not got there
    assert sent_model(tmp_path, None, 75) is None
    assert round_sent(sent_model(tmp_path, run, 75)) == 75 and round_sent(tmp_path / "pretrained.pt") == 1


def test_the_leakage_runs_dpsgd_at_the_noise_its_epsilon_sets_over_the_utility_phases_rounds():
    client, defenses = leakage_client({"defenses": [{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 0.3}]})
    assert "target_epsilon" not in defenses[0] and defenses[0]["max_grad_norm"] == 0.3
    # configs/defense-evaluation.yaml: 10 clients of 600 images, batches of 64, 150 rounds of one step
    assert defenses[0]["noise_multiplier"] == pytest.approx(noise_for_budget(8, 1e-5, 64 / 600, 150, "rdp"))
    assert noise_multiplier(8) > noise_for_budget(8, 1e-5, 64 / 600, 1, "rdp")  # one round's budget adds less
    assert client["batch_size"] == 2


def test_a_leakage_sweep_attacks_every_client_once_from_each_sent_model(tmp_path):
    models = {1: tmp_path / "pretrained.pt", 75: tmp_path / "round_0074.pt", 150: tmp_path / "round_0149.pt"}
    for path in [*models.values(), tmp_path / "federated.npz"]:
        path.touch()  # the config checks that they exist; their contents are not read here
    raw = leakage_config(tmp_path, {"defenses": [{"name": "noise", "sigma": 0.01}]}, seed=2, models=models)
    config = parse_config({key: value for key, value in raw.items() if key != "sweep"})
    assert config.seed == 2 and config.federation.rounds == 1 and config.federation.plateau is None
    assert config.federation.num_clients * 2 >= 30  # two seeds give a cell the targets its test needs
    assert config.client.batch_size == 2 and config.client.local_steps == 1
    assert config.adversary.rounds == [1] and config.adversary.clients == list(range(config.federation.num_clients))
    assert config.adversary.portfolio == "strongest" and not config.adversary.portfolio_exclude
    assert raw["sweep"]["grid"]["model.checkpoint"] == {f"round-{r}": str(p) for r, p in models.items()}


def test_dpsgds_leakage_runs_have_clients_enough_that_empty_poisson_batches_leave_30_targets(tmp_path):
    models = {1: tmp_path / "pretrained.pt"}
    for path in [*models.values(), tmp_path / "federated.npz"]:
        path.touch()
    dpsgd = {"defenses": [{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 1.0}]}
    clients = leakage_config(tmp_path, dpsgd, seed=0, models=models)["federation"]["num_clients"]
    # a Poisson batch of 2 expected images is empty with probability e^-2; over two seeds
    targets = binom(2 * clients, 1 - math.exp(-2))
    assert targets.cdf(29) < 0.02
    noise = {"defenses": [{"name": "noise", "sigma": 0.01}]}
    assert leakage_config(tmp_path, noise, seed=0, models=models)["federation"]["num_clients"] < clients


def test_utility_averages_more_rounds_than_one_noisy_evaluation():
    assert FINAL_EVALUATIONS >= 10


def test_a_papers_dpsgd_maps_onto_the_tuned_row_at_its_epsilon_and_its_soteria_onto_the_representation_layer():
    assert setting_of([{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 1.0}]) == "dpsgd epsilon 8"
    assert setting_of([{"name": "noise", "sigma": 0.01}]) == "noise sigma 0.01"
    assert setting_of([{"name": "soteria", "ratio": 0.8}]) == "soteria ratio 0.8 of `representation`"
    assert setting_of([{"name": "noise", "sigma": 0.5}]) is None
    assert on_lenet_fc([{"name": "soteria", "ratio": 0.8, "layer": "classifier"}])[0]["layer"] == "classifier"


def test_the_replayed_federation_learns_without_noise_and_its_noise_grows_with_the_multiplier():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    start = {name: value.detach().clone() for name, value in model.named_parameters()}
    x = torch.randn(400, 4)
    y = (x[:, 0] > 0).long()
    quiet = Federation(clients=4, batch_size=32, rounds=60, noise_multiplier=0.0)
    trained = train(model, start, (x, y), quiet, clip=1.0, lr=1.0, seed=0)
    predicted = torch.func.functional_call(model, trained, (x,)).argmax(1)
    assert (predicted == y).float().mean() > 0.9
    loud = Federation(clients=4, batch_size=32, rounds=1, noise_multiplier=100.0)
    moved = train(model, start, (x, y), loud, clip=1.0, lr=1.0, seed=0)
    # sigma C sqrt(clients) / (batch clients) = 100 / 64 per coordinate: the step is noise, far beyond a clipped mean
    assert (moved["weight"] - start["weight"]).abs().mean() > 0.5
