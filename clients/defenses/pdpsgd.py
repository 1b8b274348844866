"""``pdpsgd``: PDP-SGD as explicit regularisation (paper 000, eq. 12-13), on every Linear and Conv weight.

Paper 000 trains on L_PDP = L + kappa * sum_i theta_i^2 x_i^2 with kappa = lr^2 sigma^2, whose gradient
is grad L + 2 kappa x_i^2 theta_i (eq. 13): noise proportional to each parameter, in expectation. There
theta_i multiplies input x_i of one linear model (its code regularised a single tensor). A deep network
has one such product per weight and layer, so we sum the penalty over every Linear and Conv weight, each
with its own layer's input:

* Linear, y_j = sum_i W_ji x_i + b_j: the weight W_ji multiplies x_i, and
  sum_{j,i} W_ji^2 x_i^2 = sum_j (W^2 x^2)_j = sum(linear(x^2, W^2)).
* Conv: output position p applies the kernel to the patch P_p of the input, W_{o,c,k} multiplying
  P_p[c,k], so sum_{p,o,c,k} W_{o,c,k}^2 P_p[c,k]^2 = sum(conv(x^2, W^2)) with the layer's own stride,
  padding, dilation and groups (zero padding contributes nothing, as it should).

Per sample, the penalty is the sum of these over all layers (biases multiply the constant 1 and are left
alone, as in eq. 12); over a batch it is averaged, like the mean cross-entropy it is added to.

The layer input is *detached*: x is the layer's data, as in eq. 13, so the penalty's gradient on W is
exactly 2 kappa * mean_batch(sum over positions of x^2) * W, layer by layer, and it sends no gradient
into earlier layers through x (which would also shrink activations, a different regulariser than the
paper's). Inputs are captured by forward hooks during the ordinary training forward pass, so the
penalty costs one extra linear/conv on squared tensors per layer and no second forward.

The client's ``train_loss`` stays the data loss L; the record carries kappa and the mean penalty term.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F
from torch.utils.hooks import RemovableHandle

from clients.defenses.base import DefenseConfig, DefenseEntry, TrainingPlan, TrainingSession
from clients.defenses.registry import DEFENSES

#: layers whose weight multiplies the layer input elementwise-then-sums (ConvTranspose is not one of them)
REGULARISED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class PdpsgdDefense(DefenseConfig):
    name: Literal["pdpsgd"] = Field(
        "pdpsgd",
        description="PDP-SGD (Differential Privacy: Gradient Leakage Attacks in FL Environments, eq. 12): "
        "L + kappa sum theta^2 x^2",
    )
    sigma: float = Field(0.1, gt=0, description="noise parameter; kappa = lr^2 sigma^2 (the PDP-SGD paper's: 0.1)")
    kappa: float | None = Field(
        None, ge=0, description="regularisation constant; overrides sigma (null = lr^2 sigma^2)"
    )


def regularised_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every Linear / Conv layer of ``model`` with a trainable weight."""
    return [
        (name, layer)
        for name, layer in model.named_modules()
        if isinstance(layer, REGULARISED) and layer.weight.requires_grad
    ]


def layer_penalty(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """sum_{j,i} W_ji^2 x_i^2 of ``layer`` on its input ``x`` (batch first, detached), averaged over the batch."""
    squared, weight = x.detach() ** 2, layer.weight**2
    if isinstance(layer, nn.Linear):
        products = F.linear(squared, weight)
    else:
        # the layer's own convolution (stride, padding and its mode, dilation, groups), without bias
        products = layer._conv_forward(squared, weight, None)
    return products.sum() / max(len(x), 1)


class PdpsgdSession(TrainingSession):
    """One round under PDP-SGD: forward hooks add up every regularised layer's penalty for the loss."""

    def __init__(self, config: PdpsgdDefense, plan: TrainingPlan) -> None:
        super().__init__(plan.model, plan.optimizer)
        self.kappa = config.kappa if config.kappa is not None else (plan.lr * config.sigma) ** 2
        self._sum: torch.Tensor | None = None
        self._terms: list[float] = []
        self._hooks: list[RemovableHandle] = [plan.model.register_forward_pre_hook(self._reset)]
        self._hooks += [layer.register_forward_hook(self._add) for _, layer in regularised_layers(plan.model)]

    def _reset(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        self._sum = None  # a new forward pass: a new batch

    def _add(self, layer: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        term = layer_penalty(layer, inputs[0])
        self._sum = term if self._sum is None else self._sum + term

    def penalty(self) -> torch.Tensor | None:
        if self._sum is None:
            return None
        value = self.kappa * self._sum
        self._terms.append(value.item())
        return value

    def finish(self) -> dict[str, float]:
        return {"kappa": self.kappa, "penalty": sum(self._terms) / max(len(self._terms), 1)}

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


DEFENSES.register(
    "pdpsgd",
    help="PDP-SGD (Differential Privacy: Gradient Leakage Attacks in FL Environments, eq. 12): L + kappa sum "
    "W^2 x^2 over every Linear/Conv weight",
    config=PdpsgdDefense,
)(DefenseEntry(kind="training", train=PdpsgdSession))
