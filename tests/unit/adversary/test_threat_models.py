"""Threat models: which tapped updates become attack targets, and what the attacker is told."""

import torch
from torch import nn

from adversary.taps import AGGREGATE, TappedUpdate
from adversary.threat_models import Architecture, TrainingHyperparameters, build_views, weighted_average
from fedsim.config import AdversaryConfig

MODEL = nn.Linear(4, 3)
GLOBAL = {name: torch.zeros_like(tensor) for name, tensor in MODEL.state_dict().items()}
ARCHITECTURE = Architecture(MODEL, input_shape=(1, 2, 2), num_classes=3, input_bounds=None)
ONE_STEP = TrainingHyperparameters(lr=0.1, batch_size=8, local_steps=1, local_epochs=None)


def update(client: int, value: float, num_examples: int = 4, steps: int | None = 1, tap: str = "mitm") -> TappedUpdate:
    observed = {name: torch.full_like(tensor, value) for name, tensor in GLOBAL.items()}
    return TappedUpdate(1, tap, f"client:{client}", GLOBAL, observed, num_examples, steps, (client,))


def config(**fields) -> AdversaryConfig:
    return AdversaryConfig(attacks=[], **fields)


def test_per_client_targets_only_the_chosen_victims():
    views = build_views([update(0, 1.0), update(1, 2.0), update(2, 3.0)], config(clients=[0, 2]), ARCHITECTURE, ONE_STEP, None)
    assert [v.target for v in views] == ["client:0", "client:2"]
    assert all(v.labels is None and v.tap == "mitm" for v in views)


def test_one_local_step_reconstructs_the_whole_small_client():
    (view,) = build_views([update(0, 1.0, num_examples=4)], config(), ARCHITECTURE, ONE_STEP, None)
    assert view.num_samples == 4  # a batch of 8 holds all 4 samples
    assert view.local_training.lr == 0.1 and view.local_training.local_steps == 1


def test_one_step_on_a_large_client_uses_one_batch():
    (view,) = build_views([update(0, 1.0, num_examples=100)], config(), ARCHITECTURE, ONE_STEP, None)
    assert view.num_samples == 8


def test_epochs_without_reported_steps_follow_from_the_sample_count():
    epochs = TrainingHyperparameters(lr=0.1, batch_size=8, local_steps=None, local_epochs=2)
    (view,) = build_views([update(0, 1.0, num_examples=20, steps=None)], config(), ARCHITECTURE, epochs, None)
    assert view.local_training.local_steps == 6 and view.num_samples == 20


def test_without_hyperparameters_the_attacker_only_knows_the_sample_count():
    cfg = config(knows={"local_training": False})
    (view,) = build_views([update(0, 1.0, num_examples=5)], cfg, ARCHITECTURE, ONE_STEP, None)
    assert view.local_training is None and view.num_samples == 5


def test_a_wire_tap_forms_the_aggregate_itself_by_fedavg():
    updates = [update(0, 1.0, num_examples=1), update(1, 4.0, num_examples=3)]
    views = build_views(updates, config(targets="aggregate"), ARCHITECTURE, ONE_STEP, None)
    (view,) = views
    assert view.target == AGGREGATE and view.num_samples == 4
    assert torch.allclose(view.observed_state["weight"], torch.full((3, 4), 3.25))
    assert view.local_training.batch_size == 4 and view.local_training.local_steps == 1


def test_a_server_tap_attacks_the_aggregate_it_computed():
    aggregate = TappedUpdate(1, "server", AGGREGATE, GLOBAL, weighted_average([update(0, 2.0)]), 4, None, (0, 1))
    views = build_views([aggregate], config(tap="server", targets="aggregate"), ARCHITECTURE, ONE_STEP, None)
    (view,) = views
    assert view.num_samples == 4  # clients' own counts are hidden: an even split of 4 examples, 2 each
    assert torch.equal(view.observed_state["bias"], torch.full((3,), 2.0))


def test_both_targets_give_clients_then_the_aggregate():
    views = build_views([update(0, 1.0), update(1, 2.0)], config(targets="both"), ARCHITECTURE, ONE_STEP, None)
    assert [v.target for v in views] == ["client:0", "client:1", AGGREGATE]


def test_several_local_steps_do_not_compose_into_one_aggregate_step():
    multi = TrainingHyperparameters(lr=0.1, batch_size=2, local_steps=3, local_epochs=None)
    updates = [update(0, 1.0, steps=3), update(1, 2.0, steps=3)]
    (view,) = build_views(updates, config(targets="aggregate"), ARCHITECTURE, multi, None)
    assert view.local_training is None  # only the update's direction is matched then


def test_labels_are_granted_only_through_the_grant():
    asked = []

    def grant(server_round, client, count):
        asked.append((server_round, client, count))
        return torch.arange(count) + 10 * client

    cfg = config(targets="both", knows={"labels": "known"})
    views = build_views([update(0, 1.0, num_examples=2), update(1, 1.0, num_examples=3)], cfg, ARCHITECTURE, ONE_STEP, grant)
    assert views[0].labels.tolist() == [0, 1]
    assert views[2].labels.tolist() == [0, 1, 10, 11, 12]
    assert (1, 1, 3) in asked


def test_round_selection():
    assert AdversaryConfig(attacks=["dlg"], rounds="2-4").attacks_round(3)
    assert not AdversaryConfig(attacks=["dlg"], rounds=[1, 5]).attacks_round(3)
    assert not AdversaryConfig(attacks=[], rounds="all").attacks_round(1)
