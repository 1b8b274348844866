"""Threat models: which tapped updates become attack targets, and what the attacker is told."""

import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.inversion.problem import BatchedProblem
from adversary.registry import ATTACKS
from adversary.taps import AGGREGATE, TappedUpdate
from adversary.threat_models import Architecture, TrainingHyperparameters, build_views, weighted_average
from clients.training import train_locally
from fedsim.config import AdversaryConfig, ClientConfig

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
    views = build_views(
        [update(0, 1.0), update(1, 2.0), update(2, 3.0)], config(clients=[0, 2]), ARCHITECTURE, ONE_STEP, None
    )
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


def test_the_noise_a_protocol_puts_into_its_aggregate_reaches_that_aggregates_view_only():
    def noise(counts):  # the protocol's public noise model, given the counts sent in clear
        return 1e-6 * sum(counts)

    secure = TappedUpdate(1, "server", AGGREGATE, GLOBAL, GLOBAL, 7, None, (0, 1), contributor_examples=(3, 4))
    (view,) = build_views([secure], config(tap="server", targets="aggregate"), ARCHITECTURE, ONE_STEP, None, noise)
    assert view.update_noise == pytest.approx(7e-6)

    # counts not sent in clear (plain FedAvg), or an aggregate a wire tap formed itself: no noise known
    plain = dataclasses.replace(secure, contributor_examples=())
    (view,) = build_views([plain], config(tap="server", targets="aggregate"), ARCHITECTURE, ONE_STEP, None, noise)
    assert view.update_noise is None
    views = build_views([update(0, 1.0), update(1, 2.0)], config(targets="both"), ARCHITECTURE, ONE_STEP, None, noise)
    assert [view.update_noise for view in views] == [None, None, None]


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
    views = build_views(
        [update(0, 1.0, num_examples=2), update(1, 1.0, num_examples=3)], cfg, ARCHITECTURE, ONE_STEP, grant
    )
    assert views[0].labels.tolist() == [0, 1]
    assert views[2].labels.tolist() == [0, 1, 10, 11, 12]
    assert (1, 1, 3) in asked


def test_round_selection():
    assert AdversaryConfig(attacks=["dlg"], rounds="2-4").attacks_round(3)
    assert not AdversaryConfig(attacks=["dlg"], rounds=[1, 5]).attacks_round(3)
    assert not AdversaryConfig(attacks=[], rounds="all").attacks_round(1)


CPU = torch.device("cpu")
LR = 0.5


def linear_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def batchnorm_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 16, 3)
    ).double()


def federation_round(model: nn.Module, batches: list[int], partitions: list[int], seed: int = 0):
    """Each client takes one SGD step on its own batch and reports its partition size; the mitm sees each."""
    generator = torch.Generator().manual_seed(seed)
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    updates, images, labels = [], [], []
    for client, (batch, partition) in enumerate(zip(batches, partitions, strict=True)):
        x = torch.rand(batch, 1, 4, 4, generator=generator, dtype=torch.float64)
        y = torch.randint(0, 3, (batch,), generator=generator)
        trained = copy.deepcopy(model)
        train_locally(
            trained, x, y, np.arange(batch), ClientConfig(lr=LR, batch_size=batch, local_steps=1), seed=client
        )
        observed = {k: v.detach().clone() for k, v in trained.state_dict().items()}
        updates.append(TappedUpdate(1, "mitm", f"client:{client}", global_state, observed, partition, 1, (client,)))
        images.append(x)
        labels.append(y)
    return updates, torch.cat(images), labels


def aggregate_view(model, updates, labels, batch_size: int):
    architecture = Architecture(model, input_shape=(1, 4, 4), num_classes=3, input_bounds=None)
    training = TrainingHyperparameters(lr=LR, batch_size=batch_size, local_steps=1, local_epochs=None)
    config = AdversaryConfig(attacks=[], targets="aggregate", knows={"labels": "known"})
    (view,) = build_views(updates, config, architecture, training, lambda r, client, n: labels[client][:n])
    return view


def objective_at(view, images: torch.Tensor) -> float:
    problem = BatchedProblem.build(
        ATTACKS.get("ig").spec, AttackOptions(name="ig", regularizers=[]), [view], [0], CPU, torch.float64
    )
    return float(problem.objective_at(0, images))


@pytest.mark.parametrize("partitions", [[10, 90], [10, 2]])
def test_unequal_partitions_give_a_zero_objective_at_the_true_images(partitions):
    model = linear_net()
    updates, images, labels = federation_round(model, batches=[1, 1], partitions=partitions)
    view = aggregate_view(model, updates, labels, batch_size=1)
    assert view.target == AGGREGATE and view.contributors == (0, 1)
    assert view.groups == ((1, partitions[0] / sum(partitions)), (1, partitions[1] / sum(partitions)))
    assert objective_at(view, images) < 1e-12
    uniform = dataclasses.replace(view, groups=())  # the former model: one mean over all samples
    assert objective_at(uniform, images) > 1e-5


def test_batchnorm_normalises_each_clients_batch_with_its_own_statistics():
    model = batchnorm_net()
    updates, images, labels = federation_round(model, batches=[3, 3], partitions=[30, 30])
    view = aggregate_view(model, updates, labels, batch_size=3)
    assert objective_at(view, images) < 1e-12
    pooled = dataclasses.replace(view, groups=())  # equal shares: only the pooled statistics are wrong
    assert objective_at(pooled, images) > 1e-5


def test_the_batchnorm_statistics_prior_is_refused_on_an_aggregate_of_several_clients():
    model = batchnorm_net()
    updates, _, labels = federation_round(model, batches=[2, 2], partitions=[2, 2])
    view = dataclasses.replace(aggregate_view(model, updates, labels, batch_size=2), bn_statistics=True)
    with pytest.raises(ValueError, match="aggregate of 2 clients"):
        BatchedProblem.build(
            ATTACKS.get("gradinversion").spec, AttackOptions(name="gradinversion"), [view], [0], CPU, torch.float64
        )


def test_the_truth_of_an_aggregate_is_exactly_the_clients_in_it(tmp_path):
    """Client 1 timed out, then finished late and wrote its ground truth: it is not in the aggregate, so its
    images are not in the truth the aggregate is scored against."""
    from types import SimpleNamespace

    from fedsim.engine.leakage.scoring import LeakageScorer
    from fedsim.rundir.ground_truth import GroundTruthStore

    x_train = np.arange(6 * 16, dtype=np.float32).reshape(6, 1, 4, 4) / 96
    identity = SimpleNamespace(denormalize=lambda x: x)
    federation = SimpleNamespace(
        dataset=SimpleNamespace(x_train=x_train, y_train=np.arange(6)), test_stats=identity, client_stats=[identity] * 3
    )
    truth_files = GroundTruthStore(tmp_path)
    for client in (0, 1, 2):
        truth_files.write(1, client, [[2 * client, 2 * client + 1]], [[2 * client, 2 * client + 1]])
    scorer = LeakageScorer(SimpleNamespace(run_dir=tmp_path), federation, save_images=False, seed=0)
    model = linear_net()
    updates, _, labels = federation_round(model, batches=[2, 2], partitions=[2, 2])
    view = dataclasses.replace(aggregate_view(model, updates, labels, batch_size=2), contributors=(0, 2))
    truth = scorer.truth_for(view)
    assert truth.labels.tolist() == [0, 1, 4, 5]
