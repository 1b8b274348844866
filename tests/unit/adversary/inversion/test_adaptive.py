"""Adaptive attacks and the `strongest` portfolio.

Each adaptive variant models a defense's public mechanism: on an update that defense produced from the
true images, its objective at the true images is (near) zero, where plain Inverting Gradients' is not.
"""

from dataclasses import replace

import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from adversary.inversion.problem import BatchedProblem
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import invert
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from clients.defenses import DEFENSES, DefenseContext
from fedsim.config import parse_config

CPU = torch.device("cpu")
SHAPE = (1, 6, 6)
LR = 0.1


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(36, 24), nn.Tanh(), nn.Linear(24, 5)).double()


def defended_view(
    defense: dict, images: torch.Tensor, labels: torch.Tensor, seed: int = 1
) -> tuple[AttackerView, nn.Module]:
    """One client's one-step update of ``images`` after ``defense``, as a wire tap sees it."""
    model = tiny_model()
    loss = nn.functional.cross_entropy(model(images), labels)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    update = {name: g.detach() for (name, _), g in zip(model.named_parameters(), grads, strict=True)}
    (config,) = parse_config({"client": {"defenses": [defense]}}).client.defenses
    context = DefenseContext(model=model, x=images, y=labels, lr=LR, generator=torch.Generator().manual_seed(seed))
    sent = DEFENSES.get(config.name).apply(update, config, context).update
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    observed = {name: global_state[name] - LR * sent[name] for name in global_state}
    view = AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state=observed,
        input_shape=SHAPE,
        num_classes=5,
        num_samples=len(images),
        labels=labels,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=len(images)),
    )
    return view, model


def setting_for(model: nn.Module, *defenses: dict) -> AttackSetting:
    in_force = tuple(DefenseInForce(d["name"], {k: v for k, v in d.items() if k != "name"}) for d in defenses)
    return AttackSetting(model=model, model_name="tiny", input_shape=SHAPE, num_classes=5, defenses=in_force)


def objective_at_truth(name: str, view: AttackerView, setting: AttackSetting, truth: torch.Tensor) -> float:
    options = AttackOptions(name=name, regularizers=[]).adapted(setting)
    problem = BatchedProblem.build(ATTACKS.get(name).spec, options, [view], [0], CPU, torch.float64)
    return float(problem.objective_at(0, truth))


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(3)
    return torch.rand(2, *SHAPE, generator=generator, dtype=torch.float64), torch.tensor([1, 3])


@pytest.mark.parametrize(
    "defense, adaptive",
    [
        ({"name": "prune", "ratio": 0.9}, "ig-prune"),
        ({"name": "gradient_dropout", "p": 0.6, "sigma": 0.0}, "ig-dropout"),
        ({"name": "soteria", "ratio": 0.8}, "ig-soteria"),
        ({"name": "clip", "max_norm": 0.01, "scope": "per-tensor"}, "ig-clip"),
    ],
)
def test_an_adaptive_attack_matches_the_defended_update_exactly_at_the_true_images(batch, defense, adaptive):
    images, labels = batch
    view, model = defended_view(defense, images, labels)
    setting = setting_for(model, defense)
    assert objective_at_truth(adaptive, view, setting, images) < 1e-9
    assert objective_at_truth("ig", view, setting, images) > 1e-4  # the defense does hide the images from plain IG


@pytest.mark.parametrize(
    "defense, adaptive",
    [
        ({"name": "prune", "ratio": 0.9}, "ig-prune"),
        ({"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}, "ig-dropout"),
        ({"name": "soteria", "ratio": 0.8}, "ig-soteria"),
        ({"name": "clip", "max_norm": 0.01, "scope": "per-tensor"}, "ig-clip"),
        ({"name": "noise", "sigma": 0.01}, "ig-noise"),
        ({"name": "pdpsgd", "sigma": 0.1}, "ig-pdpsgd"),
    ],
)
def test_an_adaptive_attack_declares_every_option_its_defense_fills_in(defense, adaptive):
    # a sweep compares a point with its run without these (fedsim.sweep.execute): one left undeclared would
    # make every finished point of such a sweep look like another experiment
    options = AttackOptions(name=adaptive)
    adapted = options.adapted(replace(setting_for(tiny_model(), defense), lr=LR))
    changed = {key for key in type(options).model_fields if getattr(adapted, key) != getattr(options, key)}
    assert changed and changed <= type(options).adapted_fields


def test_gradient_dropout_entries_above_a_few_sigma_are_the_kept_ones_labels_are_read_from(batch):
    images, labels = batch
    defense = {"name": "gradient_dropout", "p": 0.6, "sigma": 1e-4}
    view, model = defended_view(defense, images, labels)
    setting = setting_for(model, defense)
    options = AttackOptions(name="ig-dropout", noise_multiples=5, regularizers=[]).adapted(setting)
    assert options.match_entries == "above-threshold"
    assert options.match_threshold == pytest.approx(5e-4) and options.observed_scale == 0.6
    assert (options.dropout_p, options.dropout_sigma) == (0.6, 1e-4)
    # the entries above the cut are kept ones, the gradient over p exactly: matched alone, the truth matches exactly
    kept_only = options.model_copy(update={"dropout_sigma": 0.0})  # the likelihood off: the kept entries alone
    problem = BatchedProblem.build(ATTACKS.get("ig-dropout").spec, kept_only, [view], [0], CPU, torch.float64)
    assert float(problem.objective_at(0, images)) < 1e-9


def test_labels_come_back_when_dropout_replaced_their_bias_entries():
    generator = torch.Generator().manual_seed(5)
    images, labels = torch.rand(1, *SHAPE, generator=generator, dtype=torch.float64), torch.tensor([2])
    for seed in range(20):  # find a round whose mask dropped the true class's bias entry
        defense = {"name": "gradient_dropout", "p": 0.5, "sigma": 1e-4}
        view, model = defended_view(defense, images, labels, seed=seed)
        if abs(float(view.parameter_delta()["3.bias"][2])) < 1e-2:
            break
    else:
        pytest.fail("no mask dropped the label's bias entry")
    view = replace(view, labels=None)
    options = AttackOptions(name="ig-dropout").adapted(setting_for(model, defense))
    problem = BatchedProblem.build(ATTACKS.get("ig-dropout").spec, options, [view], [0], CPU, torch.float64)
    assert problem.labels.tolist() == [[2]]


def test_the_noise_aware_objective_is_about_one_noise_unit_at_the_truth(batch):
    images, labels = batch
    defense = {"name": "noise", "sigma": 0.05}
    view, model = defended_view(defense, images, labels)
    value = objective_at_truth("ig-noise", view, setting_for(model, defense), images)
    assert value == pytest.approx(1.0, abs=0.15)  # a chi-square over ~1,000 entries, divided by their count


def test_settings_given_in_the_config_win_over_what_the_defense_suggests():
    setting = setting_for(tiny_model(), {"name": "clip", "max_norm": 1.0, "scope": "per-tensor"})
    assert AttackOptions(name="ig-clip").adapted(setting).loss == "layer-cosine"
    assert AttackOptions(name="ig-clip", loss="l2").adapted(setting).loss == "l2"


def test_pdpsgd_penalty_is_simulated_exactly_through_the_clients_own_training():
    import numpy as np

    from clients.training import train_locally

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, stride=2, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(27, 5)).double()
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    images = torch.rand(2, *SHAPE, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    labels = torch.tensor([0, 4])
    defense = {"name": "pdpsgd", "sigma": 3.0}  # kappa = (0.1 * 3)^2: a large, visible penalty
    client = parse_config({"client": {"defenses": [defense], "lr": LR, "batch_size": 2, "local_steps": 1}}).client
    train_locally(model, images, labels, np.arange(2), client, seed=0)
    view = AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state={k: v.detach().clone() for k, v in model.state_dict().items()},
        input_shape=SHAPE,
        num_classes=5,
        num_samples=2,
        labels=labels,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=2),
    )
    setting = AttackSetting(
        model=model,
        model_name="tiny",
        input_shape=SHAPE,
        num_classes=5,
        lr=LR,
        defenses=(DefenseInForce("pdpsgd", {"sigma": 3.0, "kappa": None}),),
    )
    assert AttackOptions(name="ig-pdpsgd").adapted(setting).pdp_kappa == pytest.approx(0.09)
    assert objective_at_truth("ig-pdpsgd", view, setting, images) < 1e-12
    assert objective_at_truth("ig", view, setting, images) > 1e-6  # plain IG's simulation misses the penalty


def test_ig_dropout_reports_the_share_of_entries_it_matched_and_plain_ig_reports_none(batch):
    images, labels = batch
    defense = {"name": "gradient_dropout", "p": 0.6, "sigma": 1e-3}
    view, model = defended_view(defense, images, labels)
    setting = setting_for(model, defense)
    options = AttackOptions(name="ig-dropout", iterations=2, regularizers=[]).adapted(setting)
    (reconstruction,) = invert(ATTACKS.get("ig-dropout").spec, [view], options, seed=0, device=CPU)
    sent = [(view.global_state[name] - view.observed_state[name]) / LR for name, _ in model.named_parameters()]
    above = sum(int((entries.abs() > options.match_threshold).sum()) for entries in sent)
    assert reconstruction.matched_fraction == pytest.approx(above / sum(entries.numel() for entries in sent))
    assert 0.3 < reconstruction.matched_fraction < 0.7  # about p of the entries were kept, few of them tiny
    plain = AttackOptions(name="ig", iterations=2, regularizers=[])
    (unmasked,) = invert(ATTACKS.get("ig").spec, [view], plain, seed=0, device=CPU)
    assert unmasked.matched_fraction is None
