"""``ig-dpsgd``: the client's DP-SGD step (Opacus) simulated on the dummy batch, its noise as the likelihood's unit."""

import numpy as np
import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.inversion.problem import BatchedProblem
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import parse_config

SHAPE = (1, 6, 6)
LR = 0.1


def dpsgd_round(noise_multiplier: float, max_grad_norm: float) -> tuple[AttackerView, AttackSetting, torch.Tensor]:
    """One client's one-step DP-SGD round on 3 images (Opacus), as a wire tap sees it, and the run's setting."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 24), nn.Tanh(), nn.Linear(24, 5)).double()
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    images = torch.rand(3, *SHAPE, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    labels = torch.tensor([0, 2, 4])
    defense = {"name": "dpsgd", "noise_multiplier": noise_multiplier, "max_grad_norm": max_grad_norm}
    defense["poisson_sampling"] = False  # every sample in the one step, as the attacker's dummy batch
    client = parse_config({"client": {"defenses": [defense], "lr": LR, "batch_size": 3, "local_steps": 1}}).client
    train_locally(model, images, labels, np.arange(3), client, seed=0)
    view = AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state={k: v.detach().clone() for k, v in model.state_dict().items()},
        input_shape=SHAPE,
        num_classes=5,
        num_samples=3,
        labels=labels,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=3),
    )
    options = {k: v for k, v in client.defenses[0].model_dump().items() if k != "name"}
    setting = AttackSetting(
        model=model,
        model_name="tiny",
        input_shape=SHAPE,
        num_classes=5,
        lr=LR,
        local_steps=1,
        batch_size=3,
        defenses=(DefenseInForce("dpsgd", options),),
    )
    return view, setting, images


def objective_at_truth(name: str, view: AttackerView, setting: AttackSetting, images: torch.Tensor) -> float:
    options = AttackOptions(name=name, regularizers=[]).adapted(setting)
    problem = BatchedProblem.build(ATTACKS.get(name).spec, options, [view], [0], torch.device("cpu"), torch.float64)
    return float(problem.objective_at(0, images))


def test_the_simulated_clipped_step_is_the_one_opacus_took():
    view, setting, images = dpsgd_round(noise_multiplier=0.0, max_grad_norm=0.05)  # every sample clipped
    assert AttackOptions(name="ig-dpsgd").adapted(setting).per_sample_clip == 0.05
    assert objective_at_truth("ig-dpsgd", view, setting, images) < 1e-9
    assert objective_at_truth("ig", view, setting, images) > 1e-4  # the unclipped mean points elsewhere


def test_with_the_noise_multiplier_the_objective_is_about_one_noise_unit_at_the_truth():
    view, setting, images = dpsgd_round(noise_multiplier=1.0, max_grad_norm=1.0)
    options = AttackOptions(name="ig-dpsgd").adapted(setting)
    assert options.loss == "l2" and options.noise_sigma == pytest.approx(1.0 * 1.0 / 3)
    # a chi-square over ~1,000 entries divided by their count
    assert objective_at_truth("ig-dpsgd", view, setting, images) == pytest.approx(1.0, abs=0.15)


def test_the_attack_adapts_only_where_dpsgd_is_in_force():
    _, setting, _ = dpsgd_round(noise_multiplier=0.0, max_grad_norm=1.0)
    without = AttackSetting(model=setting.model, model_name="tiny", input_shape=SHAPE, num_classes=5)
    assert "dpsgd" in AttackOptions(name="ig-dpsgd").refusal(without)
    assert AttackOptions(name="ig-dpsgd").refusal(setting) is None
