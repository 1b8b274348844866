"""``ig-pdpsgd``: Inverting Gradients that simulates PDP-SGD's penalty in the client's local step.

PDP-SGD (paper 000) trains on L + kappa * sum W^2 x^2 over every Linear and Conv weight, kappa = lr^2
sigma^2 unless given. The penalty is public and deterministic: its gradient 2 kappa W * E[x^2] is a known
function of the weights and of the client's own inputs, so the attacker adds it to the simulated update
(``targets.pdp_penalty``) instead of treating it as noise; it even carries information about the inputs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


class IgPdpsgdOptions(AdaptiveOptions):
    name: Literal["ig-pdpsgd"] = Field("ig-pdpsgd", description="Inverting Gradients simulating PDP-SGD's penalty")
    adapts_to: ClassVar[tuple[str, ...]] = ("pdpsgd",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"pdp_kappa"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-000": Preset(
            dict(optimizer="lbfgs", lr=1.0, iterations=200),
            source="Differential Privacy: Gradient Leakage Attacks in Federated Learning Environments, "
            "section 5: the attack optimises with L-BFGS, 200 iterations shown",
            summary="L-BFGS, 200 iterations",
        ),
    }

    def refusal(self, setting: AttackSetting) -> str | None:
        reason = super().refusal(setting)
        defense = self.defense_in(setting)
        if reason is None and defense is not None and defense.options.get("kappa") is None and setting.lr is None:
            reason = (
                "ig-pdpsgd needs kappa: set pdpsgd's kappa, or adversary.knows.local_training (kappa = lr^2 sigma^2)"
            )
        return reason

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        kappa = defense.options.get("kappa")
        if kappa is None:
            kappa = (float(setting.lr or 0.0) * float(defense.options.get("sigma", 0.1))) ** 2
        return {"pdp_kappa": float(kappa)}


ATTACKS.register(
    "ig-pdpsgd",
    help="adaptive (pdpsgd): Inverting Gradients with PDP-SGD's penalty in the simulated local step",
    config=IgPdpsgdOptions,
)(Attack(adaptive_spec("ig-pdpsgd")))
