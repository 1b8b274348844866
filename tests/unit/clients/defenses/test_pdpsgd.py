"""PDP-SGD's penalty gradient on every linear and conv weight."""

import numpy as np
import pytest
import torch
from dp_training import IDS, N, assert_plain, client, toy
from torch import nn
from torch.nn import functional as F

from clients.defenses.base import TrainingContext, TrainingPlan
from clients.defenses.pdpsgd import PdpsgdSession
from clients.training import train_locally

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


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
    plan = TrainingPlan(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        5,
        5,
        1,
        0.1,
        np.random.default_rng(0),
        0,
        TrainingContext(1, 1),
    )
    (config,) = client({"name": "pdpsgd", "kappa": 0.3}).defenses
    with PdpsgdSession(config, plan) as session:
        model(x)
        penalty = session.penalty()
    assert set(inputs) == {"conv1", "conv2", "conv3", "fc1", "fc2"}
    expected = 0.3 * sum(brute_force_penalty(getattr(model, name), inputs[name]) for name in inputs)
    assert penalty.item() == pytest.approx(expected.item(), rel=1e-12)
    ours = torch.autograd.grad(penalty, list(model.parameters()), allow_unused=True)
    reference = torch.autograd.grad(expected, list(model.parameters()), allow_unused=True)
    for (name, _), g, r in zip(model.named_parameters(), ours, reference):
        if name.endswith("weight"):
            assert g is not None and g.abs().min() > 0, name  # every weight entry is regularised
            assert torch.allclose(g, r, rtol=1e-12, atol=0), name  # ... through its own layer's input only
        else:
            assert g is None or torch.count_nonzero(g) == 0, name
    for spy in spies:
        spy.remove()
    assert_plain(model)  # the session's hooks are gone
