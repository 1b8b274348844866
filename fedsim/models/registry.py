"""The model registry, the builder signature and the one-line error type of `fedsim.models`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import nn

from fedsim.base import Registry

if TYPE_CHECKING:  # only for annotations: fedsim.config imports this package lazily, keep it that way
    from fedsim.config import ModelConfig

#: builder(cfg, in_channels, num_classes, image_size) -> freshly initialised module
ModelBuilder = Callable[["ModelConfig", int, int, int], nn.Module]

#: Every built-in model; ``tv:<name>`` models are resolved dynamically and are not listed here.
MODELS: Registry[ModelBuilder] = Registry("model")


class ModelError(ValueError):
    """A model problem, already phrased as one line naming the field, the value and what is allowed."""
