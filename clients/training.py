"""Local training of one client for one round: a function of tensors, no Flower, no files."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedsim.config import ClientConfig

OPTIMIZERS = {
    "sgd": lambda params, cfg: torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    ),
    "adam": lambda params, cfg: torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay),
}


class NonFiniteLossError(RuntimeError):
    """The local loss became NaN or infinite; the client's update must not be aggregated."""


@dataclass(frozen=True)
class LocalTrainingResult:
    train_loss: float  # mean loss over the local steps
    steps: int
    batches: list[list[int]]  # sample ids of every step, in the order used (ground truth, never sent)
    labels: list[list[int]]  # their labels, in the same order


def batch_schedule(
    num_samples: int, batch_size: int, cfg: ClientConfig, rng: np.random.Generator
) -> list[np.ndarray]:
    """Positions (into the client's data) of every local step's mini-batch.

    Each epoch is a fresh permutation; `local_steps` walks through consecutive epochs, so a client
    with fewer samples than one batch still trains on all of them.
    """
    batch_size = min(batch_size, num_samples)
    per_epoch = math.ceil(num_samples / batch_size)
    steps = cfg.local_steps if cfg.local_steps is not None else per_epoch * cfg.local_epochs
    schedule: list[np.ndarray] = []
    while len(schedule) < steps:
        order = rng.permutation(num_samples)
        schedule.extend(order[i : i + batch_size] for i in range(0, num_samples, batch_size))
    return schedule[:steps]


def train_locally(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sample_ids: np.ndarray,
    cfg: ClientConfig,
    seed: int,
) -> LocalTrainingResult:
    """Train ``model`` in place on (x, y) as configured; ``sample_ids`` are the global ids of the rows."""
    torch.manual_seed(seed)  # dropout masks and any other in-model randomness
    rng = np.random.default_rng(seed)
    schedule = batch_schedule(len(x), cfg.batch_size, cfg, rng)
    device = next(model.parameters()).device
    optimizer = OPTIMIZERS[cfg.optimizer](model.parameters(), cfg)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    losses = []
    for positions in schedule:
        index = torch.from_numpy(positions)
        inputs, targets = x[index].to(device), y[index].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"local loss is {loss.item()} at step {len(losses) + 1}")
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return LocalTrainingResult(
        train_loss=float(np.mean(losses)),
        steps=len(schedule),
        batches=[sample_ids[p].tolist() for p in schedule],
        labels=[y[torch.from_numpy(p)].tolist() for p in schedule],
    )
