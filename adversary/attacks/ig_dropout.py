"""``ig-dropout``: Inverting Gradients against Gradient Dropout (paper 004), knowing its Algorithm 1.

Gradient Dropout keeps each entry with probability p, scaled by 1/p, and replaces the others by
N(0, sigma^2). An entry above a few sigma is a kept entry (noise rarely gets there) and equals the true
gradient over p; the attack matches those, rescaled by p, and leaves the rest out. ``noise_multiples``
sets the cut (default 4: a dropped entry passes it with probability 6e-5). With sigma = 0 the dropped
entries are exactly zero and the nonzero ones are matched.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


class IgDropoutOptions(AdaptiveOptions):
    # TV 1e-2: the best of 1e-4 / 1e-3 / 1e-2 in bench/adaptive_tuning.py (CIFAR-10 test images 0-2)
    field_defaults: ClassVar[dict[str, Any]] = {**IG_DEFAULTS, "regularizers": [{"name": "tv", "weight": 1e-2}]}
    name: Literal["ig-dropout"] = Field(
        "ig-dropout", description="Inverting Gradients on Gradient Dropout's kept entries"
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("gradient_dropout",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"observed_scale", "match_entries", "match_threshold"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-004": Preset(
            dict(iterations=4000),
            source="Safeguarding Federated Learning from Data Reconstruction Attacks via Gradient Dropout, "
            "section 5.1: 4,000 attack iterations against batches of 8 "
            "(1,000 for single images; the saturation step doubles them where they lead)",
            summary="4000 iterations",
        ),
    }
    noise_multiples: float = Field(4.0, gt=0, description="entries above this many sigma count as kept")

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        sigma = float(defense.options.get("sigma", 0.0))
        changes: dict[str, Any] = {"observed_scale": float(defense.options.get("p", 1.0))}
        if sigma > 0:
            changes |= {"match_entries": "above-threshold", "match_threshold": self.noise_multiples * sigma}
        else:
            changes |= {"match_entries": "nonzero"}
        return changes


ATTACKS.register(
    "ig-dropout",
    help="adaptive (gradient_dropout): Inverting Gradients matching the entries above the dropout noise",
    config=IgDropoutOptions,
)(Attack(adaptive_spec("ig-dropout")))
