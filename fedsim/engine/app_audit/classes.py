"""The audited app's number of classes: its model's outputs, not the labels its (small) partitions happen to hold.

A partition read through the app's data function may lack a class; attacks that size a one-hot or recover labels
need the model's own count, or every one of them fails on a shape mismatch.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from fedsim.engine.lifecycle.federation import Federation


def model_outputs(model: nn.Module, image_shape: tuple[int, ...]) -> int | None:
    """The size of the model's output for one image of ``image_shape``; None where a forward pass cannot tell."""
    was_training = model.training
    model.eval()  # no batch-norm statistics move, and a batch of two is fine for every layer
    try:
        with torch.no_grad():
            output = model(torch.zeros(2, *image_shape))
    except Exception:  # the attacks that need a forward pass report the model's own error
        return None
    finally:
        model.train(was_training)
    return int(output.shape[-1]) if isinstance(output, torch.Tensor) and output.ndim == 2 else None


def with_model_classes(federation: Federation, model: nn.Module) -> Federation:
    """The federation with as many classes as the model has outputs, where it has more than the data set names."""
    dataset = federation.dataset
    outputs = model_outputs(model, tuple(dataset.x_train.shape[1:]))
    if outputs is None or outputs <= dataset.num_classes:
        return federation
    names = dataset.class_names + tuple(str(c) for c in range(dataset.num_classes, outputs))
    widened = dataclasses.replace(dataset, num_classes=outputs, class_names=names)
    return dataclasses.replace(federation, dataset=widened)
