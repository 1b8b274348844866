"""The attacker's view of one SGD step of a linear classifier: the cheapest victim a prior can guide."""

from __future__ import annotations

import numpy as np
import torch
from digit_views import client_view
from torch import nn

from adversary.view import AttackerView

CPU = torch.device("cpu")


def linear_view(x: torch.Tensor, y: torch.Tensor) -> AttackerView:
    """One full-batch SGD step (lr 1) of a linear classifier on (x, y), as a man-in-the-middle sees it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(x.shape[1:])), 10))
    return client_view(model, x, y)
