"""adversary.attacks: reconstruction from a simulated client's update, label recovery, batching, options.

Views are built the way a tap sees a client: global weights, the client's own local training
(``clients.training.train_locally``), the weights it sends. Images are raw digits in [0, 1], fed to the
model unnormalised, so a reconstruction is scored directly against the truth (outside the attack).
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch
from torch import nn

from adversary import ATTACKS
from adversary.inversion import recover_labels, run_attack
from adversary.attacks import dlg, gradinversion, inverting_gradients
from adversary.inversion.model import AttackerModel, victim_batch_statistics
from adversary.inversion.problem import BatchedProblem, group_views
from adversary.inversion.solver import invert
from adversary.inversion.spec import DEFAULTED_FIELDS
from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import AttackOptions, ClientConfig, ConfigError, DataConfig, ModelConfig, parse_config
from fedsim.data import load_dataset
from fedsim.models import build_model

CPU = torch.device("cpu")
SIDE = 16


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset(DataConfig(dataset="digits", image_size=SIDE), seed=0)
    return torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)


def one_per_class(y: torch.Tensor, classes: list[int], pick: int = 0) -> list[int]:
    return [int(torch.nonzero(y == c).flatten()[pick]) for c in classes]


def lenet(seed: int = 0, channels: int = 1) -> nn.Module:
    """DLG's sigmoid LeNet with U(-0.5, 0.5) init."""
    return build_model(ModelConfig(name="lenet", init="uniform"), channels, 10, SIDE, seed)


def tiny_bn_net(seed: int = 0) -> nn.Module:
    """Two strided conv + BatchNorm + sigmoid blocks and a linear classifier, DLG's uniform init."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 5, stride=2, padding=2), nn.BatchNorm2d(8), nn.Sigmoid(),
        nn.Conv2d(8, 8, 5, stride=2, padding=2), nn.BatchNorm2d(8), nn.Sigmoid(),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    )  # fmt: skip
    for parameter in model.parameters():
        nn.init.uniform_(parameter, -0.5, 0.5)
    return model


def client_view(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float = 1.0,
    local_steps: int = 1,
    batch_size: int | None = None,
    **facts,
) -> AttackerView:
    """What a man-in-the-middle sees when a client trains ``model`` on (x, y) and sends its weights back."""
    batch_size = batch_size or len(x)
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    cfg = ClientConfig(lr=lr, batch_size=batch_size, local_steps=local_steps)
    train_locally(client, x, y, np.arange(len(x)), cfg, seed=0)
    return AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state={k: v.detach().clone() for k, v in client.state_dict().items()},
        input_shape=tuple(x.shape[1:]),
        num_classes=10,
        num_samples=len(x),
        local_training=LocalTraining(lr=lr, local_steps=local_steps, batch_size=batch_size),
        input_bounds=(torch.zeros(x.shape[1]), torch.ones(x.shape[1])),
        **facts,
    )


def psnr(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    """PSNR in dB of [0, 1] images, under the best pairing of reconstructed and true samples."""
    estimate = estimate.clamp(0, 1)
    best = min(((estimate[list(p)] - truth) ** 2).mean().item() for p in itertools.permutations(range(len(truth))))
    return 10 * float(np.log10(1.0 / best))


# ------------------------------------------------------------------------------------ reconstruction


@pytest.mark.parametrize(
    "options",
    [
        AttackOptions(name="dlg"),
        AttackOptions(name="idlg"),
        AttackOptions(name="ig", iterations=500),
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


def test_gradinversion_beats_inverting_gradients_with_the_victims_batchnorm_statistics(digits):
    x, y = digits
    truth, labels = x[:2], y[:2]
    view = client_view(tiny_bn_net(), truth, labels, lr=0.1, bn_statistics=True)
    budget = dict(iterations=500)

    [with_bn] = run_attack(AttackOptions(name="gradinversion", **budget), [view], seed=0, device=CPU)
    [without] = run_attack(AttackOptions(name="ig", **budget), [view], seed=0, device=CPU)
    random_image = psnr(torch.rand_like(truth), truth)

    assert psnr(with_bn.images, truth) > random_image + 15  # about 7 dB for a random image
    assert psnr(with_bn.images, truth) > psnr(without.images, truth) + 3


def test_victim_batchnorm_statistics_are_solved_exactly_from_one_step_of_running_stats(digits):
    x, y = digits
    model = tiny_bn_net()
    view = client_view(model, x[:3], y[:3], lr=0.1, bn_statistics=True)
    recorder = AttackerModel.from_view(view, CPU, torch.float64, record_bn=True)

    _, true_stats = recorder.forward(recorder.parameters_from(view.global_state, CPU, torch.float64), x[:3].double())
    solved = victim_batch_statistics(view, CPU, torch.float64)

    for (mean, var), (mean_v, var_v) in zip(true_stats, solved, strict=True):
        torch.testing.assert_close(mean_v, mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(var_v, var, rtol=1e-4, atol=1e-5)


def test_gradinversion_refuses_without_the_bn_statistics_grant(digits):
    x, y = digits
    view = client_view(tiny_bn_net(), x[:2], y[:2], lr=0.1)  # bn_statistics defaults to False
    with pytest.raises(ValueError, match="adversary.knows.bn_statistics: true"):
        run_attack(AttackOptions(name="gradinversion", iterations=1), [view], seed=0, device=CPU)


def test_several_local_steps_are_inverted_by_unrolling_the_clients_sgd(digits):
    """Two SGD steps of one image each. The client's shuffle put the 4 first; the attacker's restart 0 walks
    its (sorted) labels 2, 4 in that order and fails, restart 1 tries the other order and wins on its objective."""
    x, y = digits
    index = one_per_class(y, [4, 2])
    truth, labels = x[index], y[index]
    view = client_view(lenet(), truth, labels, lr=0.5, local_steps=2, batch_size=1)

    [rec] = run_attack(AttackOptions(name="idlg", iterations=300, restarts=2), [view], seed=0, device=CPU)

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
        round=3, tap="server", target="client:5", model=model, global_state=before,
        observed_state=client.state_dict(), input_shape=(1, SIDE, SIDE), num_classes=10, num_samples=1,
    )  # fmt: skip

    [rec] = run_attack(AttackOptions(name="idlg"), [view], seed=0, device=CPU)

    assert rec.labels.tolist() == y[:1].tolist()
    assert psnr(rec.images, x[:1]) > 25  # the scale-free distance does not need the learning rate


# ------------------------------------------------------------------------------------ label recovery


@pytest.mark.parametrize("model_name", ["lenet", "mlp3"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distinct_labels_are_recovered_exactly(digits, model_name, seed):
    x, y = digits
    classes = [0, 3, 5, 7, 9]
    index = one_per_class(y, classes, pick=seed)
    init = "uniform" if model_name == "lenet" else "default"
    model = build_model(ModelConfig(name=model_name, init=init), 1, 10, SIDE, seed)

    labels = recover_labels(client_view(model, x[index], y[index], lr=0.1))

    assert labels.dtype == torch.int64
    assert labels.tolist() == classes


def test_one_image_label_is_recovered_on_a_classifier_without_bias(digits):
    """iDLG's rule: with non-negative features only the true class's weight row has negative gradients."""
    x, y = digits
    model = nn.Sequential(nn.Flatten(), nn.Linear(SIDE * SIDE, 32), nn.Sigmoid(), nn.Linear(32, 10, bias=False))
    for index in one_per_class(y, [2, 8]):
        assert recover_labels(client_view(model, x[index : index + 1], y[index : index + 1])).tolist() == [int(y[index])]


def test_repeated_labels_are_counted(digits):
    x, y = digits
    index = one_per_class(y, [2, 2, 2, 7], pick=0)
    index[1], index[2] = one_per_class(y, [2], pick=1)[0], one_per_class(y, [2], pick=2)[0]
    model = build_model(ModelConfig(name="mlp3"), 1, 10, SIDE, 0)

    assert recover_labels(client_view(model, x[index], y[index], lr=0.1)).tolist() == [2, 2, 2, 7]


def test_granted_labels_are_used_as_given(digits):
    x, y = digits
    view = client_view(lenet(), x[:2], y[:2], labels=torch.tensor([4, 1]))
    assert recover_labels(view).tolist() == [4, 1]


# ----------------------------------------------------------------------------------------- batching


@pytest.mark.parametrize(
    ("spec", "options"),
    [
        (inverting_gradients.SPEC, AttackOptions(name="ig", iterations=30, restarts=3, precision="float64")),
        (dlg.SPEC, AttackOptions(name="dlg", iterations=15, restarts=3, precision="float64")),
    ],
    ids=["signed-adam", "batched-lbfgs"],
)
def test_batched_restarts_equal_a_loop_of_single_restarts(digits, spec, options):
    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])

    [batched] = invert(spec, [view], options, seed=3, device=CPU)
    looped = [invert(spec, [view], options, seed=3, device=CPU, restart_ids=[r])[0] for r in range(3)]

    np.testing.assert_allclose(batched.restart_objectives, [rec.objective for rec in looped], rtol=1e-6)
    best = int(np.argmin(batched.restart_objectives))
    torch.testing.assert_close(batched.images, looped[best].images, rtol=1e-5, atol=1e-6)


def test_views_of_one_round_share_one_batched_problem(digits):
    x, y = digits
    model = lenet()
    views = [client_view(model, x[i : i + 1], y[i : i + 1]) for i in range(3)]
    other_model = client_view(lenet(seed=1), x[:1], y[:1])
    two_samples = client_view(model, x[:2], y[:2])

    assert group_views([*views, other_model, two_samples]) == [[0, 1, 2], [3], [4]]

    recs = run_attack(AttackOptions(name="idlg", iterations=200), views, seed=0, device=CPU)
    assert [psnr(rec.images, x[i : i + 1]) > 25 for i, rec in enumerate(recs)] == [True] * 3


def test_trajectory_keeps_the_best_restart_every_n_iterations(digits):
    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])
    [rec] = run_attack(AttackOptions(name="dlg", iterations=20, restarts=2, log_every=5), [view], seed=0, device=CPU)

    assert [point.iteration for point in rec.trajectory] == [5, 10, 15, 20]
    assert rec.trajectory[-1].objective == pytest.approx(rec.objective)
    assert all(point.images.device == CPU and point.images.shape == (1, 1, SIDE, SIDE) for point in rec.trajectory)
    objectives = [point.objective for point in rec.trajectory]
    assert objectives == sorted(objectives, reverse=True)  # L-BFGS with a line search never goes up


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


def test_every_attack_is_registered_with_its_paper_or_the_defense_it_adapts_to():
    assert {"dlg", "ggssr", "gradinversion", "idlg", "ig"} <= set(ATTACKS.names())
    for name, help_text in ATTACKS.describe().items():
        adapts_to = ATTACKS.config(name).adapts_to
        if adapts_to:  # an adaptive variant names the defense whose mechanism it models
            assert all(defense in help_text for defense in adapts_to), name
        else:
            assert "20" in help_text, name  # a year: the paper is named
    assert AttackOptions(name="dlg").optimizer == "lbfgs"
    assert AttackOptions(name="ig").loss == "cosine"
    assert gradinversion.SPEC.bn_prior and not inverting_gradients.SPEC.bn_prior


def test_unknown_attack_names_are_config_errors():
    with pytest.raises(ConfigError, match="dlg"):
        parse_config({"adversary": {"attacks": ["dlgg"]}})


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


# ------------------------------------------------------------------------------------ local training


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
        round=1, tap="mitm", target="client:0", model=model, global_state=global_state,
        observed_state={k: v.detach().clone() for k, v in client.state_dict().items()}, input_shape=(1, SIDE, SIDE),
        num_classes=10, num_samples=2, labels=labels,
        local_training=LocalTraining(lr=0.3, local_steps=3, batch_size=2, momentum=0.9, weight_decay=0.01),
    )  # fmt: skip

    def objective(view) -> float:
        options = AttackOptions(name="ig", regularizers=[])
        problem = BatchedProblem.build(ATTACKS.get("ig").spec, options, [view], [0], CPU, torch.float64)
        return float(problem.objective_at(0, truth))

    assert objective(view) < 1e-12
    plain = replace(view, local_training=LocalTraining(lr=0.3, local_steps=3, batch_size=2))
    assert objective(plain) > 1e-6  # ignoring momentum and weight decay leaves the truth off the optimum


def test_an_attacker_that_knows_the_local_training_refuses_adam():
    with pytest.raises(ConfigError, match=r"^client.optimizer = 'adam': an attacker that knows the local training simulates SGD"):
        parse_config({"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"]}})
    parse_config({"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"], "knows": {"local_training": False}}})
