"""``ig-prune``: Inverting Gradients on a pruned update: its surviving entries, and what its zeros say.

``prune`` zeroes the smallest-magnitude entries (over all tensors, or per tensor) and sends the rest unchanged,
so every nonzero entry is the client's exact update, and every zeroed entry was at most as large as the smallest
surviving one of its scope. The attack matches the survivors (Inverting Gradients' cosine) and adds a squared
hinge on the dummy's entries at the zeroed positions above that bound:

    bound_weight * 1/2 * sum_{zeroed} max(0, |u_i| / |u_kept| - tau / |o_kept|)^2

in the cosine's units (both sides divided by the norm of their kept part, so an unknown scale does not matter;
1 - cosine is half the squared distance of unit vectors). At the true images it is zero, like the cosine.
With ``loss: l2`` and a known learning rate the hinge is in gradient units, ``max(0, |u_i| - tau)^2``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


def smallest_kept(observed: list[torch.Tensor], kept: list[torch.Tensor], scope: str) -> list[torch.Tensor]:
    """Per tensor, the smallest magnitude the pruning kept in its scope (the whole update, or that tensor)."""
    per_tensor = [torch.where(m > 0, o.abs(), math.inf).min() for o, m in zip(observed, kept, strict=True)]
    if scope == "per-tensor":
        return per_tensor
    overall = torch.stack(per_tensor).min()
    return [overall] * len(per_tensor)


def pruned_bound_excess(
    dummy: list[torch.Tensor], observed: list[torch.Tensor], kept: list[torch.Tensor], scope: str, relative: bool
) -> torch.Tensor:
    """1/2 sum over the zeroed entries of max(0, |u| - tau)^2 (relative: both sides over their kept part's norm)."""
    bounds = smallest_kept(observed, kept, scope)
    if relative:
        dummy_norm = torch.sqrt(sum((u * m).pow(2).sum() for u, m in zip(dummy, kept, strict=True)) + 1e-20)
        observed_norm = torch.sqrt(sum((o * m).pow(2).sum() for o, m in zip(observed, kept, strict=True)) + 1e-20)
        dummy = [u / dummy_norm for u in dummy]
        bounds = [tau / observed_norm for tau in bounds]
    excess = [(torch.relu(u.abs() - tau) * (1 - m)).pow(2).sum() for u, m, tau in zip(dummy, kept, bounds, strict=True)]
    return 0.5 * torch.stack(excess).sum()


class IgPruneOptions(AdaptiveOptions):
    # TV 1e-2: the best of 1e-4 / 1e-3 / 1e-2 in bench/adaptive_tuning.py (CIFAR-10 test images 0-2)
    field_defaults: ClassVar[dict[str, Any]] = {**IG_DEFAULTS, "regularizers": [{"name": "tv", "weight": 1e-2}]}
    name: Literal["ig-prune"] = Field(
        "ig-prune", description="Inverting Gradients on a pruned update's survivors and its zeroed entries' bound"
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("prune",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"match_entries", "prune_scope"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-001": Preset(
            dict(iterations=10000),
            source="Data Reconstruction Attacks and Defenses: A Systematic Evaluation, appendix: "
            "10,000 Adam iterations, step decay x0.1 at 3/8, 5/8 and 7/8, against every defense",
            summary="10000 iterations",
        ),
    }
    bound_weight: float = Field(
        1.0, ge=0, description="weight of the hinge on zeroed entries above the smallest kept one (0: survivors only)"
    )
    prune_scope: Literal["global", "per-tensor"] = Field(
        "global", description="the scope the pruning ranked entries in (filled in from the defense)"
    )

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        return {"match_entries": "nonzero", "prune_scope": defense.options.get("scope", "global")}

    def gradient_match(
        self,
        dummy: list[torch.Tensor],
        observed: list[torch.Tensor],
        masks: list[torch.Tensor],
        scale_free: bool,
    ) -> torch.Tensor:
        value = super().gradient_match(dummy, observed, masks, scale_free)
        if not masks or self.bound_weight == 0:
            return value
        relative = scale_free or self.loss != "l2"
        excess = pruned_bound_excess(dummy, observed, masks, self.prune_scope, relative)
        return value + self.bound_weight * excess


ATTACKS.register(
    "ig-prune",
    help="adaptive (prune): Inverting Gradients on the kept entries, the zeroed ones held below the smallest kept",
    config=IgPruneOptions,
)(Attack(adaptive_spec("ig-prune")))
