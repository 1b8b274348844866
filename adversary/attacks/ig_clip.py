"""``ig-clip``: Inverting Gradients matching a clipped update up to the scale the clipping applied.

Clipping to a global norm multiplies the whole update by one unknown factor, which the cosine distance
ignores already; clipping per tensor multiplies every tensor by its own factor, which a global cosine
does not. Knowing the scope, this variant matches each tensor by its own cosine (``layer-cosine``) under
per-tensor clipping, and by the global cosine otherwise.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


class IgClipOptions(AdaptiveOptions):
    name: Literal["ig-clip"] = Field("ig-clip", description="Inverting Gradients matching a clipped update up to scale")
    adapts_to: ClassVar[tuple[str, ...]] = ("clip",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"loss"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-001": Preset(
            dict(iterations=10000),
            source="Data Reconstruction Attacks and Defenses: A Systematic Evaluation, appendix: "
            "10,000 Adam iterations, step decay x0.1 at 3/8, 5/8 and 7/8, against every defense",
            summary="10000 iterations",
        ),
    }

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        return {"loss": "layer-cosine" if defense.options.get("scope") == "per-tensor" else "cosine"}


ATTACKS.register(
    "ig-clip",
    help="adaptive (clip): Inverting Gradients with one cosine per tensor under per-tensor clipping",
    config=IgClipOptions,
)(Attack(adaptive_spec("ig-clip")))
