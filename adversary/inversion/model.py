"""The attacker's functional copy of the victim architecture, and what the architecture reveals.

The copy runs under ``torch.func`` transforms (vmap over problems, grad w.r.t. parameters and dummy data),
which rules out in-place buffer updates: its BatchNorm layers normalise with the batch statistics (as the
client's training forward does, in train mode) and do not track running statistics
(``torch.func.replace_all_batch_norm_modules_``). Dropout is switched off (eval mode): the client's masks
are random and unknown, and the expectation of the mask is the identity.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.func import functional_call, replace_all_batch_norm_modules_

from adversary.view import AttackerView

Stats = tuple[torch.Tensor, torch.Tensor]  # (per-channel batch mean, per-channel unbiased batch variance)


def batchnorm_names(model: nn.Module) -> list[str]:
    """Qualified names of the BatchNorm layers, in forward-registration (module) order."""
    return [name for name, module in model.named_modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)]


def _batch_statistics(x: torch.Tensor) -> Stats:
    # BatchNorm normalises over every dimension but the channel one (dim 1).
    dims = [0, *range(2, x.dim())]
    return x.mean(dim=dims), x.var(dim=dims, correction=1)


@dataclass
class AttackerModel:
    """A functional forward of the architecture at given parameters, optionally recording BN batch statistics."""

    module: nn.Module
    names: list[str]  # trainable parameter names, in ``named_parameters`` order
    record_bn: bool
    _records: list[Stats] | None = None

    @classmethod
    def from_view(cls, view: AttackerView, device: torch.device, dtype: torch.dtype, record_bn: bool) -> AttackerModel:
        module = copy.deepcopy(view.model)
        replace_all_batch_norm_modules_(module)
        module.train()
        for sub in module.modules():
            if isinstance(sub, nn.modules.dropout._DropoutNd):
                sub.eval()
        module.to(device=device, dtype=dtype)
        names = [name for name, _ in module.named_parameters()]
        model = cls(module=module, names=names, record_bn=record_bn)
        if record_bn:
            for name in batchnorm_names(module):
                module.get_submodule(name).register_forward_pre_hook(model._record)
        return model

    def parameters_from(
        self, state: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype
    ) -> dict[str, torch.Tensor]:
        return {name: state[name].detach().to(device=device, dtype=dtype) for name in self.names}

    def _record(self, _module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if self._records is not None:
            self._records.append(_batch_statistics(inputs[0]))

    def forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, tuple[Stats, ...]]:
        """Logits, and the (mean, var) of every BN layer's input when recording (else an empty tuple).

        The statistics are returned, never stored, so that they can leave ``torch.func`` transforms as
        outputs (a tensor kept in an attribute would leak out of its transform level).
        """
        self._records = [] if self.record_bn else None
        try:
            logits = functional_call(self.module, params, (x,))
            return logits, tuple(self._records or ())
        finally:
            self._records = None


def victim_batch_statistics(view: AttackerView, device: torch.device, dtype: torch.dtype) -> tuple[Stats, ...]:
    """The victim batch's per-BN-layer (mean, unbiased variance), solved from the running statistics.

    One local step with momentum m updates ``running = (1 - m) * running_old + m * batch_stat`` (PyTorch
    stores the *unbiased* batch variance in ``running_var``), so
    ``batch_stat = (running - (1 - m) * running_old) / m``: exact for one step. For K steps the
    attacker assumes the K batch statistics equal (they are not: the weights and mini-batches change),
    giving ``batch_stat = (running - (1 - m)^K running_old) / (1 - (1 - m)^K)``. Momentum ``None``
    (cumulative averaging) uses m = 1 / num_batches_tracked of the observed state. For an aggregate
    (FedAvg of the clients' buffers) the result is the clients' average batch statistic: the union's
    mean exactly for equal batch sizes, the average within-client variance for the variance.
    """
    steps = view.local_training.local_steps if view.local_training is not None else 1
    stats: list[Stats] = []
    for name in batchnorm_names(view.model):
        module = view.model.get_submodule(name)
        keys = (f"{name}.running_mean", f"{name}.running_var")
        if any(key not in view.global_state or key not in view.observed_state for key in keys):
            raise ValueError(
                f"gradinversion: BatchNorm layer '{name}' has no running statistics in the tapped states "
                "(track_running_stats=False?); its batch statistics cannot be derived"
            )
        if module.momentum is None:
            tracked = view.observed_state.get(f"{name}.num_batches_tracked")
            if tracked is None:
                raise ValueError(
                    f"gradinversion: BatchNorm layer '{name}' averages cumulatively but num_batches_tracked is missing"
                )
            momentum = 1.0 / float(tracked)
        else:
            momentum = float(cast(float, module.momentum))
        keep = (1.0 - momentum) ** steps
        pair = []
        for key in keys:
            old = view.global_state[key].to(device=device, dtype=dtype)
            new = view.observed_state[key].to(device=device, dtype=dtype)
            pair.append((new - keep * old) / (1.0 - keep))
        stats.append((pair[0], pair[1]))
    return tuple(stats)


def classifier_layer(model: nn.Module, num_classes: int) -> tuple[str, bool]:
    """Qualified name of the last ``nn.Linear`` with ``num_classes`` outputs, and whether it has a bias.

    Label recovery reads its update: its input is the penultimate feature vector and its output the logits.
    """
    found: tuple[str, bool] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.out_features == num_classes:
            found = (name, module.bias is not None)
    if found is None:
        raise ValueError(
            f"label recovery needs a final nn.Linear layer with {num_classes} outputs; the model has none "
            "(grant the labels with adversary.knows.labels: known)"
        )
    return found
