"""Training-level defenses: DP-SGD through Opacus (clipping, noise, Poisson batches, epsilon across rounds,
BatchNorm) and PDP-SGD's explicit regulariser (paper 000, eq. 12-13) on every Linear and Conv weight."""

import math

import numpy as np
import pytest
import torch
from opacus.accountants import create_accountant
from torch import nn
from torch.nn import functional as F

from clients.defenses.base import TrainingContext, TrainingPlan
from clients.defenses.dpsgd import poisson_schedule
from clients.defenses.pdpsgd import PdpsgdSession
from clients.defenses.privacy_ledger import ClientPrivacyLedger, LedgerEntry, epsilon
from clients.training import NonFiniteLossError, check_training_defenses, train_locally
from fedsim.config import ModelConfig, parse_config
from fedsim.models import ModelError, build_model
from tiny_configs import tiny_config

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")

N = 40
IDS = np.arange(1000, 1000 + N)  # global sample ids of the client's rows


def client(*defenses, **training):
    return parse_config({"client": {"defenses": list(defenses), **training}}).client


def dpsgd(**options):
    return {"name": "dpsgd", **options}


def toy(dtype=torch.float32, classes=2):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 1, 4, 4, generator=generator, dtype=dtype)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, classes)).to(dtype)
    return model, x, y


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def rounds(model, x, y, cfg, ledger_dir, planned, run=None):
    """Train rounds ``run`` (default 1..planned) and return each round's records."""
    records = []
    for server_round in run or range(1, planned + 1):
        context = TrainingContext(server_round, planned, ledger_dir)
        records.append(train_locally(model, x, y, IDS, cfg, seed=server_round, context=context).defense_records)
    return records


def assert_plain(model):
    """What a client caches across rounds is a plain module again: no hooks, no Opacus attributes."""
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks
    for parameter in model.parameters():
        assert not {"grad_sample", "summed_grad", "_forward_counter"} & set(vars(parameter))


# ------------------------------------------------------------------------------------ DP-SGD accounting


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_grows_every_round_exactly_as_opacus_own_accountant_counts(tmp_path, accountant):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.1, accountant=accountant), batch_size=4, local_steps=5)
    reference = create_accountant(accountant)  # stepped as Opacus' PrivacyEngine would, step by step
    epsilons = []
    for record in rounds(model, x, y, cfg, tmp_path, planned=3):
        for _ in range(5):
            reference.step(noise_multiplier=1.1, sample_rate=4 / N)
        assert record["defense.dpsgd.epsilon"] == pytest.approx(reference.get_epsilon(delta=1e-5), rel=1e-9)
        epsilons.append(record["defense.dpsgd.epsilon"])
    assert epsilons[0] < epsilons[1] < epsilons[2]
    assert record == pytest.approx(
        {"defense.dpsgd.epsilon": epsilons[2], "defense.dpsgd.accountant_covers": 1.0, "defense.dpsgd.delta": 1e-5,
         "defense.dpsgd.noise_multiplier": 1.1,
         "defense.dpsgd.sample_rate": 0.1, "defense.dpsgd.steps": 5.0, "defense.dpsgd.total_steps": 15.0}
    )  # fmt: skip
    assert all(type(value) is float for value in record.values())  # reply metrics must be plain floats


def test_a_round_run_again_after_resume_is_counted_once(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=4, local_steps=5)
    uninterrupted = rounds(model, x, y, cfg, tmp_path / "a", planned=3)
    # Killed during round 3 after its ledger entry (and round 2's) were written; --resume reruns 2 and 3.
    rounds(model, x, y, cfg, tmp_path / "b", planned=3)
    resumed = rounds(model, x, y, cfg, tmp_path / "b", planned=3, run=[2, 3])
    assert [r["defense.dpsgd.epsilon"] for r in resumed] == [r["defense.dpsgd.epsilon"] for r in uninterrupted[1:]]
    assert [entry.round for entry in ClientPrivacyLedger(tmp_path / "b").entries] == [1, 2, 3]


def test_the_ledger_survives_a_new_process_and_rewriting_a_round_replaces_only_that_round(tmp_path):
    for server_round in (1, 2, 3):
        ClientPrivacyLedger(tmp_path).record(LedgerEntry(server_round, 1.0, 0.1, 5))  # a new actor every round
    history = ClientPrivacyLedger(tmp_path).record(LedgerEntry(2, 2.0, 0.1, 5))
    assert history == [LedgerEntry(1, 1.0, 0.1, 5), LedgerEntry(2, 2.0, 0.1, 5), LedgerEntry(3, 1.0, 0.1, 5)]
    assert ClientPrivacyLedger(tmp_path).entries == history
    reference = create_accountant("rdp")
    reference.history = [(1.0, 0.1, 5), (2.0, 0.1, 5), (1.0, 0.1, 5)]
    assert epsilon(history, 1e-3, "rdp") == pytest.approx(reference.get_epsilon(delta=1e-3), rel=1e-12)


def test_a_late_round_written_after_the_next_one_neither_erases_nor_doubles_it(tmp_path):
    # Two actors opened the ledger after round 1; round 3 is recorded first, the late round 2 after it.
    ClientPrivacyLedger(tmp_path).record(LedgerEntry(1, 1.0, 0.1, 5))
    late, next_round = ClientPrivacyLedger(tmp_path), ClientPrivacyLedger(tmp_path)
    next_round.record(LedgerEntry(3, 1.0, 0.1, 5))
    history = late.record(LedgerEntry(2, 1.0, 0.1, 5))
    assert [entry.round for entry in history] == [1, 2, 3]
    assert ClientPrivacyLedger(tmp_path).record(LedgerEntry(2, 1.0, 0.1, 5)) == history  # written again: once


def test_shuffled_fixed_size_batches_report_no_epsilon_as_a_guarantee(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.1, poisson_sampling=False), batch_size=4, local_steps=5)
    (record,) = rounds(model, x, y, cfg, tmp_path, planned=1)
    assert "defense.dpsgd.epsilon" not in record
    assert record["defense.dpsgd.accountant_covers"] == 0.0
    assert record["defense.dpsgd.epsilon_if_poisson"] > 0


def test_without_noise_there_is_no_guarantee():
    assert epsilon([LedgerEntry(1, 0.0, 0.1, 5)], 1e-3, "rdp") == math.inf


def test_target_epsilon_is_spent_by_the_last_planned_round_and_not_exceeded(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(target_epsilon=2.0), batch_size=4, local_steps=5)
    records = rounds(model, x, y, cfg, tmp_path, planned=4)
    spent = [record["defense.dpsgd.epsilon"] for record in records]
    assert spent[0] < spent[1] < spent[2] < spent[3]
    assert 2.0 - 0.05 <= spent[-1] <= 2.0  # Opacus' binary search stops within 0.01 below the target
    assert records[0]["defense.dpsgd.noise_multiplier"] == records[-1]["defense.dpsgd.noise_multiplier"] > 0


# ------------------------------------------------------------------------------------ DP-SGD clipping


def test_each_samples_gradient_is_clipped_before_averaging():
    model, x, y = toy(torch.float64)
    before, lr = flat(model), 0.1
    per_sample = []
    for i in range(8):  # one batch: the first 8 samples, batch_size = N = 8
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        per_sample.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    norms = torch.stack([g.norm() for g in per_sample])
    clip = norms.median().item()  # some samples are clipped, the others pass unchanged
    clipped = sum(g * min(1.0, clip / n.item()) for g, n in zip(per_sample, norms))
    no_noise = dpsgd(noise_multiplier=0.0, max_grad_norm=clip, poisson_sampling=False)
    cfg = client(no_noise, lr=lr, batch_size=8, local_steps=1)
    train_locally(model, x[:8], y[:8], IDS[:8], cfg, seed=0)
    expected = -lr * clipped / 8
    assert (flat(model) - before - expected).norm() <= 1e-4 * expected.norm()  # Opacus divides by norm + 1e-6
    unclipped = -lr * sum(per_sample) / 8
    assert (unclipped - expected).norm() > 0.05 * expected.norm()  # clipping changed the step


def test_clipping_bounds_the_whole_update_by_lr_steps_and_c():
    clip, lr, steps = 1e-3, 0.5, 6
    no_noise = dpsgd(noise_multiplier=0.0, max_grad_norm=clip, poisson_sampling=False)
    cfg = client(no_noise, lr=lr, batch_size=4, local_steps=steps)
    model, x, y = toy()
    before = flat(model)
    train_locally(model, x, y, IDS, cfg, seed=0)
    assert (flat(model) - before).norm() <= lr * steps * clip * (1 + 1e-5)
    plain, x, y = toy()
    train_locally(plain, x, y, IDS, client(lr=lr, batch_size=4, local_steps=steps), seed=0)
    assert (flat(plain) - before).norm() > 10 * lr * steps * clip  # without dpsgd the bound does not hold


# ------------------------------------------------------------------------------------ Poisson batches


def test_poisson_batches_hold_batch_size_samples_on_average_each_sample_with_rate_q():
    schedule = poisson_schedule(1000, 0.05, 400, np.random.default_rng(0))
    sizes = np.array([len(batch) for batch in schedule])
    assert abs(sizes.mean() - 50) < 4 * math.sqrt(1000 * 0.05 * 0.95 / 400)
    assert sizes.std() > 3  # not a fixed batch size
    membership = np.zeros(1000)
    for batch in schedule:
        membership[batch] += 1
    assert abs(membership.mean() / 400 - 0.05) < 0.005


def test_the_ground_truth_batches_are_the_samples_the_model_really_saw():
    model, x, y = toy()
    seen = []
    model.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].detach().clone()))
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=4, local_steps=30)
    result = train_locally(model, x, y, IDS, cfg, seed=3)
    assert len(seen) == len(result.batches) == 30
    assert len({len(batch) for batch in result.batches}) > 2  # Poisson: sizes vary
    for inputs, batch, labels in zip(seen, result.batches, result.labels):
        rows = torch.from_numpy(np.asarray(batch, dtype=np.int64) - IDS[0])
        assert torch.equal(inputs, x[rows]) and labels == y[rows].tolist()


def test_an_empty_poisson_batch_still_takes_a_step_with_noise_of_the_expected_scale():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 64))
    x, y = torch.randn(N, 1, 4, 4), torch.zeros(N, dtype=torch.long)
    seed = next(s for s in range(1000) if len(poisson_schedule(N, 1 / N, 1, np.random.default_rng(s))[0]) == 0)
    lr, sigma, clip = 0.1, 2.0, 0.5
    cfg = client(dpsgd(noise_multiplier=sigma, max_grad_norm=clip), lr=lr, batch_size=1, local_steps=1)
    before = flat(model)
    result = train_locally(model, x, y, IDS, cfg, seed=seed)
    assert result.batches == [[]] and math.isnan(result.train_loss)
    assert result.defense_records["defense.dpsgd.steps"] == 1.0  # accounted like any step
    step = flat(model) - before
    # grad = N(0, (sigma C)^2) / expected batch size (1): every entry moves by lr * sigma * C * N(0, 1)
    assert step.std().item() == pytest.approx(lr * sigma * clip, rel=0.1)


# ------------------------------------------------------------------------------------ DP-SGD and models


def small_convnet(dp_compatible=False):
    return build_model(ModelConfig(name="convnet", width=4), 1, 2, 8, seed=0, dp_compatible=dp_compatible)


def test_a_batchnorm_model_is_refused_in_one_line_naming_the_layer():
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=4, local_steps=2)
    model = small_convnet()
    with pytest.raises(ModelError) as refused:
        check_training_defenses(model, cfg.defenses)
    message = str(refused.value)
    assert "\n" not in message and "'features.norm0' (BatchNorm2d)" in message and "fix_model: true" in message
    x, y = torch.randn(N, 1, 8, 8), torch.zeros(N, dtype=torch.long)
    with pytest.raises(ModelError, match="features.norm0"):
        train_locally(model, x, y, IDS, cfg, seed=0)
    assert_plain(model)


def test_the_run_refuses_a_batchnorm_model_before_any_round(tmp_path):
    from fedsim.engine.lifecycle.runner import run_experiment

    config = tiny_config(
        data={"max_train_samples": 40},
        model={"name": "convnet", "width": 4, "init": "default"},
        client={"defenses": [dpsgd(noise_multiplier=1.0)]},
        output={"dir": str(tmp_path), "run_name": "bn"},
    )
    with pytest.raises(ModelError, match="features.norm0"):
        run_experiment(config, quiet=True)
    assert not list((tmp_path / "bn").glob("checkpoints/*.pt"))


def test_fix_model_builds_one_groupnorm_architecture_for_server_and_clients_and_it_trains(tmp_path):
    cfg = client(dpsgd(noise_multiplier=1.0, fix_model=True), batch_size=4, local_steps=2)
    assert cfg.dp_compatible_model and not client(dpsgd(noise_multiplier=1.0)).dp_compatible_model
    server, local = small_convnet(dp_compatible=True), small_convnet(dp_compatible=True)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in server.modules())
    assert any(isinstance(m, nn.GroupNorm) for m in server.modules())
    assert server.state_dict().keys() == local.state_dict().keys() != small_convnet().state_dict().keys()
    assert all(torch.equal(server.state_dict()[k], v) for k, v in local.state_dict().items())  # same seed, same init
    check_training_defenses(server, cfg.defenses)
    x, y = torch.randn(N, 1, 8, 8), torch.randint(0, 2, (N,))
    result = train_locally(local, x, y, IDS, cfg, seed=0, context=TrainingContext(1, 1, tmp_path))
    assert 0 < result.defense_records["defense.dpsgd.epsilon"] < math.inf
    server.load_state_dict(local.state_dict())  # the server takes what the client sends
    assert_plain(local)


def test_a_failed_round_leaves_the_cached_model_plain_and_unaccounted(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=40, local_steps=2)  # q = 1: no empty batch
    with pytest.raises(NonFiniteLossError):
        nan = torch.full_like(x, float("nan"))
        train_locally(model, nan, y, IDS, cfg, seed=0, context=TrainingContext(1, 2, tmp_path))
    assert_plain(model)
    assert ClientPrivacyLedger(tmp_path).entries == []


def test_update_level_defenses_leave_local_training_as_it_is():
    weights = []
    for defenses in ([], [{"name": "clip", "max_norm": 1.0}]):
        model, x, y = toy()
        result = train_locally(model, x, y, IDS, client(*defenses, batch_size=8, local_steps=3), seed=5)
        assert result.defense_records == {}
        weights.append(flat(model))
    assert torch.equal(weights[0], weights[1])


# ------------------------------------------------------------------------------------ PDP-SGD


def test_pdp_gradient_is_grad_l_plus_two_kappa_x_squared_theta_on_a_linear_layer():
    model, x, y = toy(torch.float64, classes=3)
    layer = model[1]
    w0, b0 = layer.weight.detach().clone(), layer.bias.detach().clone()
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    grad_w, grad_b = layer.weight.grad.clone(), layer.bias.grad.clone()
    lr, sigma = 0.2, 0.5
    kappa = (lr * sigma) ** 2
    cfg = client({"name": "pdpsgd", "sigma": sigma}, lr=lr, batch_size=N, local_steps=1)
    result = train_locally(model, x, y, IDS, cfg, seed=0)  # one full-batch SGD step on L + kappa sum W^2 x^2
    x2 = (x.reshape(N, -1) ** 2).mean(0)  # eq. 13's x_i^2, averaged over the batch like the loss
    expected = grad_w + 2 * kappa * x2[None, :] * w0
    assert torch.allclose(layer.weight.detach(), w0 - lr * expected, rtol=0, atol=1e-14)
    assert torch.allclose(layer.bias.detach(), b0 - lr * grad_b, rtol=0, atol=1e-14)  # biases are not regularised
    assert result.defense_records["defense.pdpsgd.kappa"] == pytest.approx(kappa)
    assert result.defense_records["defense.pdpsgd.penalty"] == pytest.approx(kappa * (w0**2 @ x2).sum().item())


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
        self.conv3 = nn.Conv2d(4, 6, 2, bias=False)
        self.fc1 = nn.Linear(6 * 2 * 2, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        x = torch.tanh(self.conv3(torch.tanh(self.conv2(torch.tanh(self.conv1(x))))))
        return self.fc2(torch.tanh(self.fc1(torch.flatten(x, 1))))


def brute_force_penalty(layer, x):
    """sum over samples, output units/positions and weights of W^2 x^2, by unfolding patches; / batch."""
    x = x.detach()
    if isinstance(layer, nn.Linear):
        return torch.einsum("ji,ni->", layer.weight**2, x**2) / len(x)
    patches = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride) ** 2
    groups, out = layer.groups, layer.out_channels
    per_group = patches.shape[1] // groups
    total = 0
    for g in range(groups):
        w = layer.weight[g * out // groups : (g + 1) * out // groups].reshape(out // groups, -1) ** 2
        total = total + torch.einsum("oc,ncl->", w, patches[:, g * per_group : (g + 1) * per_group])
    return total / len(x)


def test_pdp_penalty_covers_every_linear_and_conv_weight_with_its_own_detached_input():
    torch.manual_seed(0)
    model = SmallCNN().double()
    x = torch.randn(5, 2, 6, 6, dtype=torch.float64)
    inputs = {}
    spies = [
        layer.register_forward_hook(lambda layer, args, out, name=name: inputs.__setitem__(name, args[0]))
        for name, layer in model.named_children()
    ]
    plan = TrainingPlan(model, torch.optim.SGD(model.parameters(), lr=0.1), 5, 5, 1, 0.1, np.random.default_rng(0), 0,
                        TrainingContext(1, 1))  # fmt: skip
    (config,) = client({"name": "pdpsgd", "kappa": 0.3}).defenses
    with PdpsgdSession(config, plan) as session:
        model(x)
        penalty = session.penalty()
    assert set(inputs) == {"conv1", "conv2", "conv3", "fc1", "fc2"}
    expected = 0.3 * sum(brute_force_penalty(getattr(model, name), inputs[name]) for name in inputs)
    assert penalty.item() == pytest.approx(expected.item(), rel=1e-12)
    ours = torch.autograd.grad(penalty, list(model.parameters()), allow_unused=True)
    reference = torch.autograd.grad(expected, list(model.parameters()), allow_unused=True)
    for (name, parameter), g, r in zip(model.named_parameters(), ours, reference):
        if name.endswith("weight"):
            assert g is not None and g.abs().min() > 0, name  # every weight entry is regularised
            assert torch.allclose(g, r, rtol=1e-12, atol=0), name  # ... through its own layer's input only
        else:
            assert g is None or torch.count_nonzero(g) == 0, name
    for spy in spies:
        spy.remove()
    assert_plain(model)  # the session's hooks are gone


# ------------------------------------------------------------------------------------ in a federation


@pytest.mark.simulation
def test_dpsgd_in_a_federation_reports_growing_epsilon_per_client_and_keeps_a_ledger_each(tmp_path):
    from fedsim.rundir.ground_truth import GroundTruthStore
    from fedsim.rundir.writer import RunStore
    from fedsim.engine.lifecycle.runner import run_experiment

    config = tiny_config(
        data={"max_train_samples": 60, "normalize": "global"},
        model={"name": "convnet", "width": 4, "init": "default"},  # BatchNorm: built with GroupNorm by server, clients and adversary
        federation={"rounds": 2},
        client={"batch_size": 6, "local_steps": 3,
                "defenses": [dpsgd(noise_multiplier=1.0, fix_model=True), {"name": "clip", "max_norm": 10.0}]},
        adversary={"tap": "mitm", "rounds": [2], "attacks": [{"name": "dlg", "iterations": 2}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )  # fmt: skip
    run_dir = run_experiment(config, quiet=True)
    rows = list(RunStore(run_dir).rows())
    fits = [row for row in rows if row["event"] == "fit"]
    assert len(fits) == 4 and all(row["status"] == "ok" for row in fits)
    for partition in (0, 1):
        mine = sorted((row for row in fits if row["client"] == partition), key=lambda row: row["round"])
        assert 0 < mine[0]["defense.dpsgd.epsilon"] < mine[1]["defense.dpsgd.epsilon"] < math.inf
        assert mine[1]["defense.dpsgd.total_steps"] == 6 and "defense.clip.norm_before" in mine[1]
        assert [entry.round for entry in ClientPrivacyLedger(run_dir / "clients" / str(partition)).entries] == [1, 2]
        assert len(GroundTruthStore(run_dir).read(2, partition)["batches"]) == 3
    attacks = [row for row in rows if row["event"] == "attack"]
    assert {row["target"] for row in attacks} == {"client:0", "client:1"}
    assert all(row["status"] == "ok" for row in attacks)  # the adversary loads the GroupNorm architecture too
