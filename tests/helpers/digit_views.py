"""Small victims for the attack tests: LeNet and a tiny BatchNorm net on 16 px digits, the attacker's view of
one client's training step on them, and PSNR under the best pairing."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import torch
from torch import nn

from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import ClientConfig, ModelConfig
from fedsim.models import build_model

CPU = torch.device("cpu")
SIDE = 16


def one_per_class(y: torch.Tensor, classes: list[int], pick: int = 0) -> list[int]:
    return [int(torch.nonzero(y == c).flatten()[pick]) for c in classes]


def lenet(seed: int = 0, channels: int = 1) -> nn.Module:
    """DLG's sigmoid LeNet with U(-0.5, 0.5) init."""
    return build_model(ModelConfig(name="lenet", init="uniform"), channels, 10, SIDE, seed)


def tiny_bn_net(seed: int = 0) -> nn.Module:
    """Two strided conv + BatchNorm + sigmoid blocks and a linear classifier, DLG's uniform init."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 5, stride=2, padding=2),
        nn.BatchNorm2d(8),
        nn.Sigmoid(),
        nn.Conv2d(8, 8, 5, stride=2, padding=2),
        nn.BatchNorm2d(8),
        nn.Sigmoid(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )
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
