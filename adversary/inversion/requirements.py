"""What an attack needs from a run, checked before the run starts.

Every attack's options model answers ``refusal(setting)``: one line saying why it cannot run in
``setting`` (the model, the defenses in force, the threat model), or ``None``. An attack named in a
config that refuses is a config error; ``adversary.attacks: strongest`` runs every registered attack
that does not refuse, adaptive variants only where the defense they model is in force.

The setting holds only what the attacker's side of the configuration says (public mechanisms and
the agreed architecture), never data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn


@dataclass(frozen=True)
class DefenseInForce:
    """A client defense of the run, with its public options (``client.defenses[i]``)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttackSetting:
    """The run as an attack's requirements see it."""

    model: nn.Module  # the agreed architecture (weights irrelevant)
    model_name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    defenses: tuple[DefenseInForce, ...] = ()
    tap: str = "mitm"  # mitm | server
    targets: str = "per-client"  # per-client | aggregate | both
    server: str = "honest"  # honest | malicious
    modification: str | None = None  # the malicious server's model modification (adversary.modification.name)
    secagg: bool = False
    knows_local_training: bool = True
    knows_num_samples: bool = True
    knows_labels: bool = False
    knows_bn_statistics: bool = False
    lr: float | None = None  # the clients' learning rate, when the attacker knows the local training
    local_steps: int | None = None  # None when clients train for epochs
    batch_size: int = 1
    optimizer: str = "sgd"  # the clients' local optimizer (client.optimizer)
    weight_decay: float = 0.0  # the clients' L2 weight decay (client.weight_decay)

    def defense(self, name: str) -> DefenseInForce | None:
        """The defense ``name`` when it is in force, else None."""
        return next((defense for defense in self.defenses if defense.name == name), None)

    @property
    def defense_names(self) -> tuple[str, ...]:
        return tuple(defense.name for defense in self.defenses)


def first_weighted_layer(model: nn.Module) -> nn.Module | None:
    """The first module, in forward-registration order, that holds a weight (Linear, Conv, ...)."""
    named = named_first_weighted_layer(model)
    return named[1] if named is not None else None


def named_first_weighted_layer(model: nn.Module) -> tuple[str, nn.Module] | None:
    """``first_weighted_layer`` with its name in ``model.named_modules()`` (the prefix of its parameters)."""
    for name, module in model.named_modules():
        if any(key == "weight" for key, _ in module.named_parameters(recurse=False)) and not isinstance(
            module, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)
        ):
            return name, module
    return None


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in model.modules())
