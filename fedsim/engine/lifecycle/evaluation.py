"""The server's own evaluation: the global model scored on the held-out test set after every round."""

from __future__ import annotations

import torch
from torch import nn

from fedsim.core.evaluation import evaluate
from fedsim.engine.lifecycle.federation import Federation


class CentralEvaluator:
    """Scores global weights on the held-out test set (server side, after every round); ``model``: the run's
    architecture, whose weights each call replaces."""

    def __init__(self, model: nn.Module, federation: Federation, device: torch.device) -> None:
        dataset = federation.dataset
        self.model = model.to(device)
        self.x = federation.test_stats.normalize(torch.from_numpy(dataset.x_test))
        self.y = torch.from_numpy(dataset.y_test)
        self.num_classes = dataset.num_classes

    def __call__(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        self.model.load_state_dict(state)
        return evaluate(self.model, self.x, self.y, self.num_classes)
