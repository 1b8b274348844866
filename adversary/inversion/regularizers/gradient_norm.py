"""``gradient_l2`` / ``gradient_l1``: the size of the dummy's update, relative to the observed one's (FedLeak).

FedLeak (Fan et al., USENIX Security 2025) regularizes the gradient of the dummy data: beside matching, the
norm of the update the dummy batch produces is penalised (L2 or L1), which favours dummies the model already
fits over ones whose large gradient only happens to point the right way. Divided by the same norm of the
observed update, the term is 1 for a dummy whose update is as large as the client's, so one weight means the
same on every model, layer count and learning rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field

from adversary.inversion.regularizers.base import Regularizer, RegularizerConfig, RegularizerContext
from adversary.inversion.regularizers.registry import REGULARIZERS

_EPS = 1e-20  # an all-zero observed update (nothing to compare with) must not divide by zero


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


class GradientL2Regularizer(RegularizerConfig):
    name: Literal["gradient_l2"] = Field(
        "gradient_l2", description="squared L2 norm of the dummy's update over the observed one's (FedLeak)"
    )


class GradientL1Regularizer(RegularizerConfig):
    name: Literal["gradient_l1"] = Field(
        "gradient_l1", description="L1 norm of the dummy's update over the observed one's (FedLeak)"
    )


def gradient_l2(x: torch.Tensor, context: RegularizerContext) -> torch.Tensor:
    """|u|_2^2 / |o|_2^2 over the matched parameters (u the dummy's update, o the observed one)."""
    dummy, observed = _flat(context.dummy_update), _flat(context.observed_update)
    return dummy.pow(2).sum() / (observed.pow(2).sum() + _EPS)


def gradient_l1(x: torch.Tensor, context: RegularizerContext) -> torch.Tensor:
    """|u|_1 / |o|_1 over the matched parameters."""
    dummy, observed = _flat(context.dummy_update), _flat(context.observed_update)
    return dummy.abs().sum() / (observed.abs().sum() + _EPS)


REGULARIZERS.register(
    "gradient_l2", help="squared L2 norm of the dummy's update, relative (FedLeak)", config=GradientL2Regularizer
)(Regularizer(term=gradient_l2))
REGULARIZERS.register(
    "gradient_l1", help="L1 norm of the dummy's update, relative (FedLeak)", config=GradientL1Regularizer
)(Regularizer(term=gradient_l1))
