"""Any PyTorch ``nn.Module`` class of the user's code, named as ``module:Class``: e.g. a Flower app's own model.

The class is imported from ``model.path`` (the folder of the user's code, put first on ``sys.path``) and built with
``model.arguments``; the data's shape is not passed, since the user's class fixes its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from torch import nn

from fedsim.core.importing import import_object
from fedsim.models.registry import MODELS, ModelConfig, ModelError


class PythonClassConfig(ModelConfig):
    target: str = Field(..., description="the model class as `module:Class`, e.g. pytorchexample.task:Net")
    path: Path | None = Field(None, description="the folder the module is imported from (null = already importable)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the class")

    @field_validator("target")
    @classmethod
    def _module_and_class(cls, value: str) -> str:
        module, separator, name = value.partition(":")
        if not (module and separator and name):
            raise ValueError(f"{value!r} is not `module:Class` (e.g. pytorchexample.task:Net)")
        return value


@MODELS.register(
    "python",
    help="your own PyTorch nn.Module class, as model.target = `module:Class` (imported from model.path)",
    config=PythonClassConfig,
)
def build_python_class(cfg: PythonClassConfig, in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    model_class = import_object(cfg.target, cfg.path, "model.target", ModelError)
    if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)):
        raise ModelError(
            f"model.target = {cfg.target!r}: is {type(model_class).__name__} {model_class!r}, not a PyTorch nn.Module "
            f"class (fedsim attacks PyTorch models only)"
        )
    try:
        return model_class(**cfg.arguments)
    except TypeError as error:
        raise ModelError(f"model.arguments = {cfg.arguments}: {cfg.target} refused them ({error})") from None
