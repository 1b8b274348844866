"""GradInversion (Yin, Mallya, Vahdat, Alvarez, Kautz & Molchanov, CVPR 2021), BatchNorm prior.

Inverting Gradients' objective plus the BatchNorm-statistics regularizer R_BN (eq. 5, ``bn_statistics``):
the per-layer batch mean and variance of the dummy batch are pulled (L2) towards those of the victim's
batch. The attacker derives the victim's statistics from the running statistics the client sent
(``model.victim_batch_statistics``); that is only allowed when the threat model grants it, so
``adversary.knows.bn_statistics: false`` is an error rather than a silent fallback to ``ig`` (a run
would otherwise report GradInversion numbers for what is Inverting Gradients). Yin et al.'s group
consistency and image-fidelity priors (which need a batch of restarts to agree and a pretrained
generator-free registration) are not included.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.options import BN_WEIGHT, TV_WEIGHT, OptimizationOptions, Preset
from adversary.inversion.requirements import AttackSetting, has_batchnorm
from adversary.inversion.solver import Attack
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS
from fedsim.core.sections import Renamed


class GradInversionOptions(OptimizationOptions):
    name: Literal["gradinversion"] = Field("gradinversion", description="GradInversion (Yin et al. 2021)")
    field_defaults: ClassVar[dict[str, Any]] = {
        **IG_DEFAULTS,
        "regularizers": [{"name": "tv", "weight": 1e-4}, {"name": "bn_statistics", "weight": 1e-2}],
    }
    renamed_keys: ClassVar[tuple[Renamed, ...]] = (TV_WEIGHT, BN_WEIGHT)
    presets: ClassVar[dict[str, Preset]] = {
        "yin-2021": Preset(
            dict(
                iterations=20000,
                restarts=1,
                loss="l2",
                lr=0.1,
                regularizers=[{"name": "tv", "weight": 1e-4}, {"name": "bn_statistics", "weight": 0.1}],
            ),
            source="Yin et al. 2021, section 4, as breaching's see-through-gradients config reproduces it: 20,000 "
            "Adam iterations at lr 0.1 on the squared gradient distance, TV 1e-4, BatchNorm prior 0.1",
            summary="20000 iterations, l2, TV 1e-4, BN prior 0.1",
        ),
    }
    requires: ClassVar[str] = "adversary.knows.bn_statistics and a model with BatchNorm"

    def refusal(self, setting: AttackSetting) -> str | None:
        if self.bn_weight > 0 and not setting.knows_bn_statistics:
            return "gradinversion's BatchNorm prior needs adversary.knows.bn_statistics: true"
        if self.bn_weight > 0 and not has_batchnorm(setting.model):
            return f"gradinversion's BatchNorm prior needs a model with BatchNorm layers; {setting.model_name} has none"
        return super().refusal(setting)


SPEC = AttackSpec(name="gradinversion", signed=True, box=True, lr_decay=True, bn_prior=True)

ATTACKS.register(
    "gradinversion",
    help="GradInversion (Yin et al. 2021): Inverting Gradients plus a BatchNorm-statistics prior",
    config=GradInversionOptions,
)(Attack(SPEC))
