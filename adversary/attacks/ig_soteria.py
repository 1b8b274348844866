"""``ig-soteria``: Inverting Gradients that leaves Soteria's defended layer out of the matching.

Soteria (Sun et al. 2021) perturbs only the weight update of the layer fed by the representation; every
other layer's update is the client's own. Paper 004 breaks it by matching those and ignoring the defended
layer, which is what this variant does (the layer is Soteria's ``layer``, else the model's first Linear,
as the defense picks it).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field
from torch import nn

from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


class IgSoteriaOptions(AdaptiveOptions):
    name: Literal["ig-soteria"] = Field(
        "ig-soteria", description="Inverting Gradients without Soteria's defended layer"
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("soteria",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"exclude_layers"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-001": Preset(
            dict(iterations=10000),
            source="Data Reconstruction Attacks and Defenses: A Systematic Evaluation, appendix: "
            "10,000 Adam iterations, step decay x0.1 at 3/8, 5/8 and 7/8, against every defense",
            summary="10000 iterations",
        ),
    }

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        layer = defense.options.get("layer") or next(
            (name for name, module in setting.model.named_modules() if isinstance(module, nn.Linear)), None
        )
        return {"exclude_layers": [f"{layer}.weight"]} if layer else {}


ATTACKS.register(
    "ig-soteria",
    help="adaptive (soteria): Inverting Gradients leaving the defended layer's weight out (as in "
    "Safeguarding FL from Data Reconstruction Attacks via Gradient Dropout)",
    config=IgSoteriaOptions,
)(Attack(adaptive_spec("ig-soteria")))
