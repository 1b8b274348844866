"""Name checking, seeded construction, DLG's uniform init, checkpoint loading and parameter counting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from fedsim.models.architectures.torchvision_adapter import TV_PREFIX, check_torchvision_name
from fedsim.models.checkpoint import load_checkpoint
from fedsim.models.registry import MODELS, ModelError

if TYPE_CHECKING:
    from fedsim.models.registry import ModelConfig

#: DLG (Zhu et al. 2019) initialises every weight and bias from U(-0.5, 0.5); attacks succeed far more often then.
UNIFORM_INIT_BOUND = 0.5


def check_model_name(name: str) -> None:
    """Accept a registered model or ``tv:<torchvision classifier>``; else ModelError listing what is allowed."""
    if name.startswith(TV_PREFIX):
        check_torchvision_name(name)
        return
    if name in MODELS and name not in MODELS.families:
        return
    raise ModelError(MODELS.unknown_message(name))


def build_model(
    cfg: ModelConfig, in_channels: int, num_classes: int, image_size: int, seed: int, *, dp_compatible: bool = False
) -> nn.Module:
    """Build ``cfg.name`` for the data set's shape; the same seed always gives the same initial weights.

    Order: seed torch, construct (pretrained weights included), make it DP-compatible if asked, apply
    ``cfg.init``, then load ``cfg.checkpoint`` over everything, so a checkpoint always wins.

    ``dp_compatible`` (``client.defenses`` dpsgd with ``fix_model: true``, see
    ``ClientConfig.dp_compatible_model``) swaps the layers Opacus cannot train for its replacements
    (``ModuleValidator.fix``: BatchNorm -> GroupNorm). That changes the state_dict, so the server, every
    client and the adversary must all build the model with the same flag.
    """
    check_model_name(cfg.name)
    for field, value in (("in_channels", in_channels), ("num_classes", num_classes), ("image_size", image_size)):
        if value < 1:
            raise ModelError(f"{field} = {value}: must be at least 1 to build model '{cfg.name}'")
    # the model's own config checks its keys (e.g. pretrained weights exist for torchvision models only)
    torch.manual_seed(seed)
    builder = MODELS.get(MODELS.tag_of(cfg.name))
    model = builder(cfg, in_channels, num_classes, image_size)
    if dp_compatible:
        from opacus.validators import ModuleValidator  # fedsim.models needs Opacus for this alone

        model = ModuleValidator.fix(model)
    if cfg.init == "uniform":
        uniform_init_(model)
    if cfg.checkpoint is not None:
        load_checkpoint(model, cfg.checkpoint, cfg.name)
    return model


class DataShape(Protocol):
    """What a model needs to know of the data set (a ``Dataset``, or a client's ``ClientSpec``)."""

    @property
    def channels(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def image_size(self) -> int: ...


def build_run_model(
    model: ModelConfig, shape: DataShape, seed: int, *, with_weights: bool, dp_compatible: bool
) -> nn.Module:
    """The run's model (``model``) for the data set's shape, as the server, clients and adversary share it.

    ``with_weights=False`` builds the architecture only (no ``model.checkpoint``, no pretrained weights):
    for whoever receives the weights afterwards (clients, the evaluator, the adversary). ``True`` also
    loads them: the initial global model. Both honour ``dp_compatible`` (``client.dp_compatible_model``),
    which changes the state_dict, so everyone must build through here with the same flag.
    """
    if not with_weights:
        # each key at its default, which loads nothing (pretrained: False for torchvision models, None for text ones)
        fields = type(model).model_fields
        model = model.model_copy(update={k: fields[k].default for k in ("checkpoint", "pretrained") if k in fields})
    return build_model(
        model, shape.channels, shape.num_classes, shape.image_size, seed=seed, dp_compatible=dp_compatible
    )


def uniform_init_(model: nn.Module, bound: float = UNIFORM_INIT_BOUND) -> nn.Module:
    """Draw every parameter (weights, biases, norm affines) from U(-bound, bound) in place; buffers stay."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.uniform_(-bound, bound)
    return model


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (shared parameters counted once; buffers such as BN statistics not)."""
    return sum(parameter.numel() for parameter in model.parameters())
