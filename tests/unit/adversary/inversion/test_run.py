"""Running an attack: DLG, iDLG and IG recover digits from one or several local steps, from the model and two
states alone; options resolve to each attack's defaults."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from digit_views import CPU, SIDE, client_view, lenet, one_per_class, psnr

from adversary.inversion import run_attack
from adversary.inversion.spec import DEFAULTED_FIELDS
from adversary.view import AttackerView
from clients.training import train_locally
from fedsim.config import AttackOptions, ClientConfig

# ------------------------------------------------------------------------------------ reconstruction


@pytest.mark.parametrize(
    "options",
    [
        AttackOptions(name="dlg", iterations=150),  # half DLG's 300: 58 dB already
        AttackOptions(name="idlg", iterations=150),
        AttackOptions(name="ig", iterations=250),
    ],
    ids=lambda o: o.name,
)
def test_each_attack_recovers_a_digit_from_one_step(digits, options):
    x, y = digits
    truth, label = x[:1], y[:1]
    view = client_view(lenet(), truth, label)

    [rec] = run_attack(options, [view], seed=0, device=CPU)

    assert rec.images.shape == truth.shape and rec.images.device == CPU
    assert psnr(rec.images, truth) > 25
    assert rec.labels.tolist() == label.tolist()


def test_several_local_steps_are_inverted_by_unrolling_the_clients_sgd(digits):
    """Two SGD steps of one image each. The client's shuffle put the 4 first; the attacker's restart 0 walks
    its (sorted) labels 2, 4 in that order and fails, restart 1 tries the other order and wins on its objective."""
    x, y = digits
    index = one_per_class(y, [4, 2])
    truth, labels = x[index], y[index]
    view = client_view(lenet(), truth, labels, lr=0.5, local_steps=2, batch_size=1)

    [rec] = run_attack(AttackOptions(name="idlg", iterations=200, restarts=2), [view], seed=0, device=CPU)

    assert rec.labels.tolist() == [2, 4]
    assert rec.objective == min(rec.restart_objectives) < 1e-3 < max(rec.restart_objectives)
    assert psnr(rec.images, truth) > 18
    assert psnr(rec.images, truth) > psnr(torch.rand_like(truth), truth) + 10


def test_the_attack_needs_nothing_but_the_model_and_two_states(digits):
    """No labels, no bounds, no local training: one step with an unknown learning rate is assumed."""
    x, y = digits
    model = lenet()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    train_locally(client, x[:1], y[:1], np.arange(1), ClientConfig(lr=0.7, batch_size=1, local_steps=1), seed=0)
    view = AttackerView(
        round=3,
        tap="server",
        target="client:5",
        model=model,
        global_state=before,
        observed_state=client.state_dict(),
        input_shape=(1, SIDE, SIDE),
        num_classes=10,
        num_samples=1,
    )

    [rec] = run_attack(AttackOptions(name="idlg", iterations=150), [view], seed=0, device=CPU)

    assert rec.labels.tolist() == y[:1].tolist()
    assert psnr(rec.images, x[:1]) > 25  # the scale-free distance does not need the learning rate


def test_deterministic_mode_is_switched_off_again_after_the_call(digits):
    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])
    assert not torch.are_deterministic_algorithms_enabled()
    run_attack(AttackOptions(name="ig", iterations=2, deterministic=True), [view], seed=0, device=CPU)
    assert not torch.are_deterministic_algorithms_enabled()


# ------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize("name", ["dlg", "idlg", "ig", "gradinversion"])
def test_options_hold_the_attacks_defaults(name):
    options = AttackOptions(name=name)
    assert all(getattr(options, field) is not None for field in DEFAULTED_FIELDS)
    assert AttackOptions(name=name, iterations=7).iterations == 7
