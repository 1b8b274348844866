"""The contract of a regularizer: a pure term ``(images, context) -> scalar`` of ONE inversion problem.

An attack's objective is its gradient distance plus ``weight * term(images, context)`` for every entry of
its ``regularizers`` list (``[{name: tv, weight: 0.03}]``), in the order listed. A term is a pure function
of tensors without data-dependent control flow (``torch.func.vmap`` maps it over problems and restarts).
Each term registers its name, help line and config model in ``REGULARIZERS``; the config model's ``weight``
is the only key every term has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from pydantic import Field

from fedsim.core.sections import Section

#: (batch mean, unbiased batch variance) per channel of one BatchNorm layer
BatchStatistics = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class RegularizerContext:
    """What the problem computed beside the dummy images, for terms that need more than the images."""

    dummy_bn: Sequence[BatchStatistics] = ()  # the dummy batch's statistics per BatchNorm layer (first forward)
    victim_bn: Sequence[BatchStatistics] = ()  # the victim's, as the attacker derived them
    dummy_update: Sequence[torch.Tensor] = ()  # the dummy's simulated update, per matched parameter (gradient units)
    observed_update: Sequence[torch.Tensor] = ()  # the observed one it is matched against, per matched parameter


class RegularizerConfig(Section):
    """Base of every regularizer's config: ``name`` (a ``Literal`` of the registered name) and ``weight``."""

    name: str
    weight: float = Field(..., ge=0, description="weight of the term in the objective (0 = off)")


@dataclass(frozen=True)
class Regularizer:
    """A registered term; ``needs_bn_statistics``: the problem must record BatchNorm statistics for it."""

    term: Callable[[torch.Tensor, RegularizerContext], torch.Tensor]
    needs_bn_statistics: bool = False
