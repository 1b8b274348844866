"""``fedleak``: FedLeak (Fan, Wang, Chen & Zhou, "Boosting Gradient Leakage Attacks: Data Reconstruction in
Realistic FL Settings", USENIX Security 2025): partial gradient matching and gradient regularization.

The paper traces the failures of gradient leakage on realistic settings (large batches, non-IID clients, trained
models) to the optimisation of the gradient matching, not to the number of solutions, and adds two changes to
an Inverting-Gradients-style attack:

* **partial gradient matching**: only a subset of the update's entries is matched. Here: in every tensor, the
  ``match_fraction`` of entries largest in magnitude in the observed update (those that carry the batch's
  signal rather than the cancellation of many samples' small contributions);
* **gradient regularization**: the size of the dummy's own update is penalised, L2 or L1
  (``regularizers: [{name: gradient_l2, weight: ...}]``, relative to the observed update's size; see
  ``adversary.inversion.regularizers.gradient_norm``), beside total variation.

Written from the paper's public description; which entries make up the subset and the form of the penalty are
this module's reading of it (the paper's approximations of its exact criteria are not reproduced). Its weights,
step size and init scale are tuned on public images like every attack's; ``match_fraction`` is an option.
Everything else is Inverting Gradients: cosine distance, signed Adam with step decay, box constraint, labels
recovered first.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.options import OptimizationOptions, Preset
from adversary.inversion.solver import Attack
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS


def largest_entries(observed: torch.Tensor, fraction: float) -> torch.Tensor:
    """1 on the ``ceil(fraction * numel)`` entries of ``observed`` largest in magnitude (ties at the cut included)."""
    magnitudes = observed.abs().reshape(-1)
    count = max(1, math.ceil(fraction * magnitudes.numel()))
    cut = torch.topk(magnitudes, count).values[-1]
    return (observed.abs() >= cut).to(observed.dtype)


class FedleakOptions(OptimizationOptions):
    name: Literal["fedleak"] = Field(
        "fedleak", description="FedLeak: partial gradient matching, gradient regularization"
    )
    # IG's defaults (cosine, signed Adam, TV 1e-4); the gradient penalty at 1e-3 of the observed update's energy:
    # the tuning searches it from 1e-7 to 1e-2
    field_defaults: ClassVar[dict[str, Any]] = {
        **IG_DEFAULTS,
        "regularizers": [{"name": "tv", "weight": 1e-4}, {"name": "gradient_l2", "weight": 1e-3}],
    }
    presets: ClassVar[dict[str, Preset]] = {
        "geiping-budget": Preset(
            dict(iterations=4800, restarts=8),
            source="Inverting Gradients' CIFAR-10 budget (Geiping et al. 2020, section 5), which FedLeak builds on: "
            "4,800 signed-Adam iterations, 8 restarts",
            summary="4800 iterations, 8 restarts",
        ),
    }
    match_fraction: float = Field(
        0.5, gt=0, le=1, description="share of each tensor's entries matched: those largest in the observed update"
    )

    def gradient_match(
        self,
        dummy: list[torch.Tensor],
        observed: list[torch.Tensor],
        masks: list[torch.Tensor],
        scale_free: bool,
    ) -> torch.Tensor:
        if self.match_fraction < 1:
            selected = [largest_entries(o, self.match_fraction) for o in observed]
            masks = [m * s for m, s in zip(masks, selected, strict=True)] if masks else selected
        return super().gradient_match(dummy, observed, masks, scale_free)


SPEC = AttackSpec(name="fedleak", signed=True, box=True, lr_decay=True)

ATTACKS.register(
    "fedleak",
    help="FedLeak (Fan et al. 2025): Inverting Gradients on the largest entries, the dummy's update norm penalised",
    config=FedleakOptions,
)(Attack(SPEC))
