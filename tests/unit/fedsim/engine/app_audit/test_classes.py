"""The audited app's classes come from its model's outputs, not from the labels its partitions happen to hold."""

from __future__ import annotations

import numpy as np
from torch import nn

from fedsim.data import ChannelStats
from fedsim.data.base import ImageDataset
from fedsim.engine.app_audit.classes import with_model_classes
from fedsim.engine.lifecycle.federation import Federation


def federation_lacking_class_9() -> Federation:
    x = np.zeros((9, 1, 4, 4), np.float32)
    y = np.arange(9, dtype=np.int64)
    names = tuple(str(c) for c in range(9))  # what the labels present alone give
    dataset = ImageDataset(x, y, x[:0], y[:0], 9, names)
    stats = ChannelStats((0.0,), (1.0,))
    return Federation(dataset, (np.arange(9),), (stats,), stats)


def test_a_partition_lacking_a_class_gets_the_models_ten_outputs():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 10))
    dataset = with_model_classes(federation_lacking_class_9(), model).dataset
    assert dataset.num_classes == 10 and dataset.class_names == tuple(str(c) for c in range(10))
    assert model.training  # the forward pass that counted the outputs left the model as it was


def test_a_model_that_cannot_run_on_the_images_leaves_the_classes_as_they_are():
    federation = federation_lacking_class_9()
    model = nn.Sequential(nn.Flatten(), nn.Linear(7, 10))  # the wrong input size: its attacks will say so
    assert with_model_classes(federation, model) is federation
