"""``soteria``: Sun et al., "Soteria: Provable Defense against Privacy Leakage in Federated Learning from
Representation Perspective" (CVPR 2021).

The representation r is the input of a Linear layer (``layer``; by default the first Linear, i.e. the
features the convolutional body hands to the classifier). The gradient of that layer's weight is
sum_b g_b r_b^T, so its column i carries representation unit i, from which gradient inversion recovers the
input. Soteria removes the units whose removal moves the reconstruction furthest per unit of change in r:
a first-order estimate of that distance for unit i is ||r_i|| / ||dr_i/dx|| (paper, eq. 7). Following the
authors' code, over a batch the score of unit i is sum_b ||dr_bi/dx_b|| / |r_bi|, and the ``ratio`` of units
with the SMALLEST score (the largest ||r_i|| / ||dr_i/dx||) have their columns of the layer's update set to
zero. All other tensors are sent unchanged.

The Jacobian norms are computed at the round's global weights in eval mode (so that BatchNorm couples no
samples: each ``dr_b/dx_b`` is one sample's), for chunks of units at once with batched backward passes.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from clients.defenses.base import DefenseConfig, DefenseContext, DefenseEntry, DefenseOutcome, Update, norm_record
from clients.defenses.registry import DEFENSES

UNITS_PER_PASS = 64  # representation units whose input gradients one batched backward pass computes


class SoteriaDefense(DefenseConfig):
    name: Literal["soteria"] = Field("soteria", description="Soteria (Sun et al. 2021): prune the representation layer")
    ratio: float = Field(0.8, gt=0, lt=1, description="fraction of representation units whose columns are zeroed")
    layer: str | None = Field(None, description="the Linear layer fed by the representation (null = the first one)")


def representation_layer(model: nn.Module, name: str | None) -> tuple[str, nn.Linear]:
    """The Linear layer fed by the representation: ``name``, or the model's first Linear."""
    linears = {key: module for key, module in model.named_modules() if isinstance(module, nn.Linear)}
    if not linears:
        raise ValueError("soteria needs a Linear layer after the representation; this model has none")
    if name is None:
        return next(iter(linears.items()))
    if name not in linears:
        raise ValueError(f"client.defenses soteria.layer = '{name}': not a Linear layer; allowed: {', '.join(linears)}")
    return name, linears[name]


def unit_scores(model: nn.Module, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """sum_b ||d r_bi / d x_b|| / |r_bi| for every unit i of ``layer``'s input r, shape (units,)."""
    captured: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            inputs = x.detach().clone().requires_grad_(True)
            model(inputs)
            representation = captured[0]
            if representation.dim() != 2:
                raise ValueError(
                    f"soteria: the input of the chosen layer has shape {tuple(representation.shape)}; "
                    "expected (batch, features)"
                )
            batch, units = representation.shape
            jacobian_norms = torch.empty(units, batch, dtype=inputs.dtype, device=inputs.device)
            for start in range(0, units, UNITS_PER_PASS):
                chunk = torch.arange(start, min(start + UNITS_PER_PASS, units), device=inputs.device)
                selectors = torch.zeros(len(chunk), batch, units, dtype=representation.dtype, device=inputs.device)
                selectors[torch.arange(len(chunk)), :, chunk] = 1.0
                # Row b of r depends on x_b only, so d(sum_b r_bi)/dx is every sample's own d r_bi / d x_b.
                (grads,) = torch.autograd.grad(
                    representation, inputs, grad_outputs=selectors, is_grads_batched=True, retain_graph=True
                )
                jacobian_norms[chunk] = grads.flatten(start_dim=2).norm(dim=2)
    finally:
        hook.remove()
        model.train(was_training)
    return (jacobian_norms / representation.detach().T.abs()).sum(dim=1)


def soteria(update: Update, config: SoteriaDefense, context: DefenseContext) -> DefenseOutcome:
    name, layer = representation_layer(context.model, config.layer)
    key = f"{name}.weight"
    scores = unit_scores(context.model, layer, context.x.to(layer.weight.device))
    count = round(config.ratio * scores.numel())
    pruned = torch.topk(scores, count, largest=False, sorted=False).indices if count else scores.new_zeros(0).long()
    column_mask = torch.ones(scores.numel(), dtype=torch.bool, device=scores.device)
    column_mask[pruned] = False
    defended = dict(update)
    defended[key] = update[key] * column_mask.to(update[key].device, update[key].dtype)
    record = norm_record(update, defended) | {"units_pruned": float(count), "units": float(scores.numel())}
    return DefenseOutcome(defended, record)


DEFENSES.register(
    "soteria",
    help="Soteria (Sun et al. 2021): zero the representation layer's most revealing columns",
    config=SoteriaDefense,
)(DefenseEntry(kind="update", apply=soteria))
