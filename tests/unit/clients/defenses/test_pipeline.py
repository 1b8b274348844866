"""The update-defense pipeline: defenses compose in order, record keys are numbered, the sent weights are the
global ones minus lr times the defended pseudo-gradient."""

import pytest
import torch
from defense_updates import context, defenses, random_update

from clients.defenses.base import global_norm
from clients.defenses.pipeline import apply_update_defenses, pseudo_gradient, record_keys, weights_to_send


def test_defenses_compose_in_the_order_given():
    update = random_update()
    chain = defenses({"name": "clip", "max_norm": 1.0}, {"name": "prune", "ratio": 0.5})

    def context_for(position):
        return context(seed=position)

    defended, records = apply_update_defenses(chain, update, context_for)
    assert global_norm(defended) <= 1.0 + 1e-9
    assert records["defense.clip.norm_after"] == pytest.approx(1.0)
    assert records["defense.prune.norm_before"] == pytest.approx(1.0)  # prune saw the clipped update
    assert records["defense.prune.fraction_zero"] == pytest.approx(0.5, abs=1e-3)


def test_repeated_defenses_get_numbered_record_keys():
    chain = defenses({"name": "noise", "sigma": 0.1}, {"name": "clip", "max_norm": 1}, {"name": "noise", "sigma": 0.2})
    assert record_keys(chain) == ["defense.noise#1", "defense.clip", "defense.noise#2"]


def test_the_sent_weights_are_global_minus_lr_times_the_defended_pseudo_gradient():
    global_params = {"w": torch.tensor([1.0, 2.0])}
    local = {"w": torch.tensor([0.9, 2.2])}
    gradient = pseudo_gradient(global_params, local, lr=0.1)
    assert torch.allclose(gradient["w"], torch.tensor([1.0, -2.0]))  # one SGD step: exactly the gradient
    assert torch.allclose(weights_to_send(global_params, gradient, lr=0.1)["w"], local["w"])
