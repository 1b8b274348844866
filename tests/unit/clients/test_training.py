"""Local training: batch schedules, learning, and the non-finite loss guard."""

import numpy as np
import pytest
import torch
from dp_training import IDS, client, flat, toy
from torch import nn

from clients.training import NonFiniteLossError, batch_schedule, train_locally
from fedsim.config import ClientConfig

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def toy_problem(n: int = 40) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(n, 1, 4, 4)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    return model, x, y


def test_epochs_visit_every_sample_once_per_epoch():
    schedule = batch_schedule(10, 4, ClientConfig(local_epochs=2), np.random.default_rng(0))
    assert [len(b) for b in schedule] == [4, 4, 2, 4, 4, 2]
    assert sorted(np.concatenate(schedule[:3])) == list(range(10))
    assert sorted(np.concatenate(schedule[3:])) == list(range(10))


def test_local_steps_run_exactly_that_many_batches_across_epochs():
    schedule = batch_schedule(5, 2, ClientConfig(local_steps=7), np.random.default_rng(0))
    assert len(schedule) == 7


def test_batch_larger_than_the_data_uses_all_of_it():
    schedule = batch_schedule(3, 64, ClientConfig(local_steps=1), np.random.default_rng(0))
    assert sorted(schedule[0]) == [0, 1, 2]


def test_training_lowers_the_loss_and_reports_the_samples_used():
    model, x, y = toy_problem()
    ids = np.arange(100, 140)
    before = nn.functional.cross_entropy(model(x), y).item()
    result = train_locally(model, x, y, ids, ClientConfig(lr=0.5, batch_size=8, local_epochs=5), seed=1)
    after = nn.functional.cross_entropy(model(x), y).item()
    assert after < before
    assert result.steps == 25
    assert sorted(i for batch in result.batches[:5] for i in batch) == ids.tolist()
    assert result.labels[0] == y[torch.as_tensor(result.batches[0]) - 100].tolist()


def test_same_seed_gives_the_same_weights():
    weights = []
    for _ in range(2):
        model, x, y = toy_problem()
        train_locally(model, x, y, np.arange(40), ClientConfig(optimizer="adam", lr=0.01, local_steps=3), seed=7)
        weights.append(model[1].weight.detach().clone())
    assert torch.equal(weights[0], weights[1])


def test_nan_loss_is_refused():
    model, x, y = toy_problem()
    with pytest.raises(NonFiniteLossError, match="step 1"):
        train_locally(model, x * float("nan"), y, np.arange(40), ClientConfig(local_steps=2), seed=0)


def test_update_level_defenses_leave_local_training_as_it_is():
    weights = []
    for defenses in ([], [{"name": "clip", "max_norm": 1.0}]):
        model, x, y = toy()
        result = train_locally(model, x, y, IDS, client(*defenses, batch_size=8, local_steps=3), seed=5)
        assert result.defense_records == {}
        weights.append(flat(model))
    assert torch.equal(weights[0], weights[1])
