"""The contract of a malicious-server model modification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from fedsim.core.sections import Section


class ModificationConfig(Section):
    """Base of every modification's options; ``name`` tags it in ``adversary.modification``."""

    name: str


@dataclass(frozen=True)
class PublicData:
    """Images the server may use to calibrate a modification: a slice of the test split no client holds."""

    images: torch.Tensor  # (N, C, H, W) in the model's input space
    source: str  # what they are, for the rows (e.g. "test split 0-255")


class Modification(Protocol):
    """``build(model, input_shape, num_classes, public, seed) -> nn.Module``: the module sent to the clients.

    ``model`` is the agreed model at the global weights. The server sends the whole module, so a modification
    plays its whole hand: it sets every weight its read-out depends on (``imprint`` sets them all), so that
    what the attack recovers does not depend on the state the honest training left the global model in."""

    def __call__(
        self,
        config: ModificationConfig,
        model: nn.Module,
        input_shape: tuple[int, int, int],
        num_classes: int,
        public: PublicData | None,
        seed: int,
    ) -> nn.Module: ...
