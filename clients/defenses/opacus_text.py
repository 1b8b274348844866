"""Opacus' per-sample gradients for the layers of ``transformers``' text models that it has no rule for.

GPT-2 computes its projections with ``transformers.pytorch_utils.Conv1D``: ``y = x W + b`` with W stored as
(in, out), the transpose of ``nn.Linear``'s. Opacus would fall back to functorch for it (a vmapped copy of the
layer per step); the closed form is one einsum, as for ``nn.Linear``: the per-sample weight gradient is
``sum_t x_t^T dy_t`` over the sample's positions, the bias gradient ``sum_t dy_t``.

Registered with Opacus' public ``register_grad_sampler`` the first time DP-SGD trains a model that has such a
layer (``transformers`` is imported by text runs only; image runs never load it).
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import torch
from torch import nn


def conv1d_grad_sample(layer: Any, activations: list[torch.Tensor], backprops: torch.Tensor) -> dict:
    """Per-sample gradients of a ``Conv1D``'s weight (n, in, out) and bias (n, out)."""
    inputs = activations[0].to(backprops.dtype)
    samples: dict[nn.Parameter, torch.Tensor] = {}
    if layer.weight.requires_grad:
        samples[layer.weight] = torch.einsum("n...i,n...o->nio", inputs, backprops)
    if layer.bias is not None and layer.bias.requires_grad:
        samples[layer.bias] = torch.einsum("n...o->no", backprops)
    return samples


@cache
def _register() -> None:
    from opacus.grad_sample import register_grad_sampler
    from transformers.pytorch_utils import Conv1D

    register_grad_sampler(Conv1D)(conv1d_grad_sample)


def register_text_rules(model: nn.Module) -> None:
    """Give Opacus the ``Conv1D`` rule when ``model`` has such a layer (once per process)."""
    if "transformers" not in sys.modules:  # no text model was built in this process
        return
    from transformers.pytorch_utils import Conv1D

    if any(isinstance(module, Conv1D) for module in model.modules()):
        _register()
