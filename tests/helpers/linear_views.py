"""The attacker's view of one SGD step of a linear classifier: the cheapest victim a prior can guide."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import ClientConfig

CPU = torch.device("cpu")


def linear_view(x: torch.Tensor, y: torch.Tensor) -> AttackerView:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(x.shape[1:])), 10))
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    train_locally(client, x, y, np.arange(len(x)), ClientConfig(lr=1.0, batch_size=len(x), local_steps=1), seed=0)
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
        local_training=LocalTraining(lr=1.0, local_steps=1, batch_size=len(x)),
        input_bounds=(torch.zeros(x.shape[1]), torch.ones(x.shape[1])),
    )
