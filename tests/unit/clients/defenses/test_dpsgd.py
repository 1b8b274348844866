"""DP-SGD: per-sample clipping, Poisson batches, the refusal of BatchNorm and the model fix, and what a failed
round leaves."""

import math

import numpy as np
import pytest
import torch
from dp_training import IDS, N, assert_plain, client, dpsgd, flat, toy
from tiny_configs import tiny_config
from torch import nn
from torch.nn import functional as F

from clients.defenses.base import TrainingContext
from clients.defenses.dpsgd import poisson_schedule
from clients.defenses.privacy_ledger import ClientPrivacyLedger
from clients.training import NonFiniteLossError, check_training_defenses, train_locally
from fedsim.config import ModelConfig
from fedsim.models import ModelError, build_model

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


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
    with pytest.raises(ModelError, match=r"features.norm0"):
        train_locally(model, x, y, IDS, cfg, seed=0)
    assert_plain(model)


def test_the_run_refuses_a_batchnorm_model_before_any_round(tmp_path):
    from fedsim.engine.run import run_experiment

    config = tiny_config(
        data={"max_train_samples": 40},
        model={"name": "convnet", "width": 4, "init": "default"},
        client={"defenses": [dpsgd(noise_multiplier=1.0)]},
        output={"dir": str(tmp_path), "run_name": "bn"},
    )
    with pytest.raises(ModelError, match=r"features.norm0"):
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
