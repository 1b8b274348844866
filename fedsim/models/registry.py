"""The model registry, the config every model's options extend, the builder signature and the one-line error type.

Each model module subclasses ``ModelConfig`` with the keys it uses and registers it with its builder:
``MODELS.register("lenet", help=..., config=LeNetConfig)(build_lenet)``. A registered family (``tv``) stands for
every name ``tv:<member>``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator
from torch import nn

from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection

#: builder(cfg, in_channels, num_classes, image_size) -> freshly initialised module
ModelBuilder = Callable[[Any, int, int, int], nn.Module]

DEFAULT_MODEL = "lenet"
FAMILY_SEPARATOR = ":"

Activation = Literal["relu", "sigmoid", "tanh", "leaky_relu", "gelu"]
Norm = Literal["batch", "group", "none"]


class ModelError(ValueError):
    """A model problem, already phrased as one line naming the field, the value and what is allowed."""


class ModelRegistry(Registry[ModelBuilder]):
    """Models by name; an entry registered with ``family=<what a member is>`` stands for every name
    ``<entry>:<member>`` (``tv`` -> ``tv:resnet18``)."""

    def __init__(self) -> None:
        super().__init__("model")
        self.families: dict[str, str] = {}

    def register(
        self, name: str, help: str = "", config: type[BaseModel] | None = None, family: str | None = None
    ) -> Callable[[ModelBuilder], ModelBuilder]:
        if config is None:
            raise ValueError(f"model '{name}' registers without a config model; pass config=<a ModelConfig subclass>")
        if family is not None:
            self.families[name] = family
        return super().register(name, help=help, config=config)

    def unregister(self, name: str) -> None:
        super().unregister(name)
        self.families.pop(name, None)

    def tag_of(self, name: str) -> str:
        family, separator, _ = name.partition(FAMILY_SEPARATOR)
        return family if separator else name

    def label(self, name: str) -> str:
        return f"{name}{FAMILY_SEPARATOR}<name>" if name in self.families else name

    def unknown_message(self, name: str) -> str:
        # a family is named by its members (tv:resnet18), never by the bare entry name
        members = [entry for entry in self.names() if entry not in self.families]
        close = difflib.get_close_matches(name, members, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        allowed = members + [
            f"{family}{FAMILY_SEPARATOR}<{member}>" for family, member in sorted(self.families.items())
        ]
        return f"unknown model '{name}'{hint}; allowed: {', '.join(allowed)}"


#: Every model: the built-in ones, and the ``tv`` family (any torchvision classifier as ``tv:<name>``).
MODELS = ModelRegistry()


class ModelConfig(PluginSection):
    """What every model takes; ``ModelConfig(name=..., **keys)`` builds the config model that model registered."""

    plugins: ClassVar[Registry[Any]] = MODELS

    name: str = Field(DEFAULT_MODEL, description="model name (see `fedsim list`), or `tv:<torchvision classifier>`")
    init: Literal["default", "uniform"] = Field(
        "default", description="`uniform` = DLG's uniform(-0.5, 0.5) init of every weight and bias"
    )
    checkpoint: Path | None = Field(None, description="state_dict to start the federation from (weights_only load)")

    @field_validator("checkpoint")
    @classmethod
    def _readable_checkpoint(cls, value: Path | None) -> Path | None:
        # checked when the config is read (`fedsim validate` too), not only when the run builds the model
        if value is not None and not os.access(value.expanduser(), os.R_OK):
            raise ValueError("not a readable file" if value.expanduser().exists() else "no such file")
        return value


class LayeredModelConfig(ModelConfig):
    """The options of fedsim's own models: their activation, width and dropout can be chosen."""

    activation: Activation | None = Field(None, description="hidden activation (null = the model's own default)")
    width: int | None = Field(None, ge=1, description="channel/unit width (null = the model's default)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout before the classifier (0 = none)")
