"""DP-SGD on a GPT-2-style model: Opacus' per-sample gradients of every parameter against per-example autograd,
and a round under a target epsilon that the ledger reports."""

import numpy as np
import pytest
import torch
from dp_training import client, dpsgd
from text_corpus import text_data, tiny_gpt2

from clients.defenses.base import TrainingContext
from clients.defenses.opacus_text import conv1d_grad_sample, register_text_rules
from clients.training import per_sequence_loss, train_locally

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def test_per_sample_gradients_of_every_gpt2_parameter_match_per_example_autograd(tmp_path):
    from opacus import GradSampleModule
    from transformers.pytorch_utils import Conv1D

    data = text_data(tmp_path, max_length=8)
    model = tiny_gpt2(data, hidden=32).double()
    rows = [0, 1, 2]  # sequences of different lengths: each one's loss is its own tokens' mean
    x, y = torch.from_numpy(data.x_train[rows]), torch.from_numpy(data.y_train[rows])
    assert len(set((y != -100).sum(dim=1).tolist())) > 1
    expected = []
    for i in range(len(rows)):
        model.zero_grad()
        per_sequence_loss(model(x[i : i + 1]), y[i : i + 1]).backward()
        expected.append({name: p.grad.clone() for name, p in model.named_parameters()})

    register_text_rules(model)
    assert GradSampleModule.GRAD_SAMPLERS[Conv1D] is conv1d_grad_sample  # the closed form, not functorch's
    wrapped = GradSampleModule(model, loss_reduction="mean")
    per_sequence_loss(wrapped(x), y).backward()

    for name, parameter in model.named_parameters():
        for i in range(len(rows)):
            torch.testing.assert_close(parameter.grad_sample[i], expected[i][name], msg=f"{name}, sequence {i}")
    wrapped.to_standard_module()


def test_the_gpt2_model_trains_under_dpsgd_at_a_target_epsilon_and_reports_what_it_spent(tmp_path):
    data = text_data(tmp_path, max_length=8)
    model = tiny_gpt2(data, hidden=32)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    x, y = torch.from_numpy(data.x_train[:40]), torch.from_numpy(data.y_train[:40])
    cfg = client(dpsgd(target_epsilon=8.0), lr=0.1, batch_size=8, local_steps=2)

    result = train_locally(model, x, y, np.arange(40), cfg, seed=0, context=TrainingContext(1, 1, tmp_path))

    assert 0 < result.defense_records["defense.dpsgd.epsilon"] <= 8.0
    assert all(not torch.equal(before[name], p) for name, p in model.named_parameters())
