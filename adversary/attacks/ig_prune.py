"""``ig-prune``: Inverting Gradients matching only the entries a pruned update kept.

``prune`` zeroes the smallest-magnitude entries and sends the rest unchanged, so every nonzero entry is
the client's exact update: the attack matches those and leaves the zeros out, instead of asking the dummy
to reproduce zeros that the defense, not the data, put there.
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


class IgPruneOptions(AdaptiveOptions):
    # TV 1e-2: the best of 1e-4 / 1e-3 / 1e-2 in bench/adaptive_tuning.py (CIFAR-10 test images 0-2)
    field_defaults: ClassVar[dict[str, Any]] = {**IG_DEFAULTS, "regularizers": [{"name": "tv", "weight": 1e-2}]}
    name: Literal["ig-prune"] = Field(
        "ig-prune", description="Inverting Gradients on a pruned update's surviving entries"
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("prune",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"match_entries"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-001": Preset(
            dict(iterations=10000),
            source="Data Reconstruction Attacks and Defenses: A Systematic Evaluation, appendix: "
            "10,000 Adam iterations, step decay x0.1 at 3/8, 5/8 and 7/8, against every defense",
            summary="10000 iterations",
        ),
    }

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        return {"match_entries": "nonzero"}


ATTACKS.register(
    "ig-prune",
    help="adaptive (prune): Inverting Gradients matching only the entries the pruned update kept",
    config=IgPruneOptions,
)(Attack(adaptive_spec("ig-prune")))
