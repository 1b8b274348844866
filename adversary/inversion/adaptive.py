"""The base of the adaptive attacks: Inverting Gradients told a defense's public mechanism.

Paper 001's rule judges a defense by the strongest attack against it, including attacks that know how it
works (Kerckhoffs: the mechanism is public, only its randomness is secret). Each adaptive variant is one
file (``ig_<defense>.py``) that subclasses ``AdaptiveOptions``, names the defenses it adapts to, and fills the
matching options of ``OptimizationOptions`` (which entries and layers are matched, at what scale, under
which noise model) from the defense's options in ``adapted``. An adaptive variant refuses to run where none
of its defenses is in force: there it would be plain Inverting Gradients.
"""

from __future__ import annotations

from typing import Any, ClassVar

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.options import OptimizationOptions
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.spec import AttackSpec


class AdaptiveOptions(OptimizationOptions):
    """Inverting Gradients' defaults, plus what a variant learns from the defense it adapts to."""

    field_defaults: ClassVar[dict[str, Any]] = IG_DEFAULTS
    requires: ClassVar[str] = "that defense in client.defenses"

    def refusal(self, setting: AttackSetting) -> str | None:
        reason = super().refusal(setting)
        if reason is None and self.defense_in(setting) is None:
            reason = f"{self.name} adapts to {' or '.join(self.adapts_to)}, and no such client defense is in force"
        return reason

    def defense_in(self, setting: AttackSetting) -> DefenseInForce | None:
        """The first defense of ``setting`` this variant adapts to."""
        return next((defense for defense in setting.defenses if defense.name in self.adapts_to), None)

    def adapted(self, setting: AttackSetting) -> AdaptiveOptions:
        defense = self.defense_in(setting)
        if defense is None:
            return self
        explicit = self.model_fields_set  # what the config set itself wins over what the defense suggests
        changes = {key: value for key, value in self.matching_for(defense, setting).items() if key not in explicit}
        return self.model_copy(update=changes)

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        """The option values that model ``defense`` (keys of OptimizationOptions)."""
        raise NotImplementedError


def adaptive_spec(name: str) -> AttackSpec:
    """Inverting Gradients' structure (signed Adam, box, step decay) under the variant's name."""
    return AttackSpec(name=name, signed=True, box=True, lr_decay=True)
