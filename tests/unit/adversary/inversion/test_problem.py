"""The batched problem: views of one round share it, a lone row evaluates as it does batched, and the client's
local SGD (momentum, weight decay) is simulated exactly."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from digit_views import CPU, SIDE, client_view, lenet, one_per_class, psnr, tiny_bn_net

from adversary import ATTACKS
from adversary.attacks import dlg, gradinversion, inverting_gradients
from adversary.inversion import run_attack
from adversary.inversion.problem import BatchedProblem, group_views
from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import AttackOptions, ClientConfig


def test_views_of_one_round_share_one_batched_problem(digits):
    x, y = digits
    model = lenet()
    views = [client_view(model, x[i : i + 1], y[i : i + 1]) for i in range(3)]
    other_model = client_view(lenet(seed=1), x[:1], y[:1])
    two_samples = client_view(model, x[:2], y[:2])

    assert group_views([*views, other_model, two_samples]) == [[0, 1, 2], [3], [4]]

    recs = run_attack(AttackOptions(name="idlg", iterations=150), views, seed=0, device=CPU)
    assert [psnr(rec.images, x[i : i + 1]) > 25 for i, rec in enumerate(recs)] == [True] * 3


@pytest.mark.parametrize(
    ("spec", "options", "model", "facts"),
    [
        (inverting_gradients.SPEC, AttackOptions(name="ig"), "lenet", dict(local_steps=2, batch_size=1)),
        (dlg.SPEC, AttackOptions(name="dlg", regularizers=[{"name": "tv", "weight": 0.01}]), "lenet", {}),
        (gradinversion.SPEC, AttackOptions(name="gradinversion"), "bn", dict(bn_statistics=True)),
    ],
    ids=["unrolled-ig", "dlg-joint-labels", "gradinversion-bn-prior"],
)
def test_a_lone_problem_evaluates_as_it_does_batched_with_others(digits, spec, options, model, facts):
    """One row takes plain autograd, several rows vmap torch.func grads: the same objective and gradient."""
    x, y = digits
    view = client_view(lenet() if model == "lenet" else tiny_bn_net(), x[:2], y[:2], lr=0.1, **facts)
    batched = BatchedProblem.build(spec, options, [view], [0, 1, 2], CPU, torch.float64)
    lone = BatchedProblem.build(spec, options, [view], [1], CPU, torch.float64)
    v = batched.initial(5, [0], [0, 1, 2])
    f_batched, g_batched = batched.evaluate(v)
    f_lone, g_lone = lone.evaluate(v[1:2])
    torch.testing.assert_close(f_lone, f_batched[1:2], rtol=1e-10, atol=0)
    torch.testing.assert_close(g_lone, g_batched[1:2], rtol=1e-8, atol=1e-12)


def test_sgd_with_momentum_and_weight_decay_is_simulated_exactly(digits):
    """Three local steps of momentum 0.9 and weight decay on the full batch: at the true images (and labels)
    the attacker's unrolled update equals what the client sent, so the objective is zero."""
    from dataclasses import replace

    from adversary.inversion.problem import BatchedProblem

    x, y = digits
    index = one_per_class(y, [1, 7])
    truth, labels = x[index].double(), y[index]
    model = lenet().double()
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    cfg = ClientConfig(lr=0.3, batch_size=2, local_steps=3, momentum=0.9, weight_decay=0.01)
    train_locally(client, truth, labels, np.arange(2), cfg, seed=0)
    view = AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state={k: v.detach().clone() for k, v in client.state_dict().items()},
        input_shape=(1, SIDE, SIDE),
        num_classes=10,
        num_samples=2,
        labels=labels,
        local_training=LocalTraining(lr=0.3, local_steps=3, batch_size=2, momentum=0.9, weight_decay=0.01),
    )

    def objective(view) -> float:
        options = AttackOptions(name="ig", regularizers=[])
        problem = BatchedProblem.build(ATTACKS.get("ig").spec, options, [view], [0], CPU, torch.float64)
        return float(problem.objective_at(0, truth))

    assert objective(view) < 1e-12
    plain = replace(view, local_training=LocalTraining(lr=0.3, local_steps=3, batch_size=2))
    assert objective(plain) > 1e-6  # ignoring momentum and weight decay leaves the truth off the optimum
