"""name -> malicious-server model modification, with its config model; each modification's module registers itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from adversary.modifications.base import Modification
from fedsim.core.registry import Registry

MODIFICATIONS: Registry[Modification] = Registry("model modification")

#: architecture name -> ``rebuild(agreed_model, description, input_shape) -> nn.Module``: how a client builds, from
#: its own code and for its own images' shape, the module a served description names
#: (``adversary.modifications.served``)
SERVED_ARCHITECTURES: Registry[Callable[[nn.Module, Mapping[str, Any], tuple[int, ...]], nn.Module]] = Registry(
    "served architecture"
)
