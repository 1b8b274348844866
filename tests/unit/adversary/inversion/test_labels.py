"""Label recovery from the last layer's update."""

from __future__ import annotations

import pytest
import torch
from digit_views import SIDE, client_view, lenet, one_per_class
from torch import nn

from adversary.inversion import recover_labels
from fedsim.config import ModelConfig
from fedsim.models import build_model


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
        assert recover_labels(client_view(model, x[index : index + 1], y[index : index + 1])).tolist() == [
            int(y[index])
        ]


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
