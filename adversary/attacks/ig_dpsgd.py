"""``ig-dpsgd``: Inverting Gradients with DP-SGD's public mechanism: per-sample clipping and the Gaussian noise.

DP-SGD (``dpsgd``, Opacus) clips every sample's gradient to norm C, sums them, adds N(0, (z C)^2) per entry and
divides by the batch size B. The attacker simulates exactly that step on its dummy batch (``per_sample_clip``):
plain Inverting Gradients matches the unclipped mean gradient, which a clipped sum equals only where no sample
was clipped. Over K local steps the noise in the update, in gradient units, is N(0, K (z C / B)^2) per entry,
so with the noise multiplier given the data term is the Gaussian likelihood of the observation: the squared
distance in units of that noise energy (``noise_sigma``, as ``ig-noise``), plus total variation as the prior.
Where the defense names only a target epsilon (its noise multiplier follows from the run's rounds, which the
attack is not told) or the learning rate is unknown (the noise's scale in the observed units is then unknown),
it matches the simulated clipped update with the cosine instead.

With Poisson sampling the client's batches are random subsets; the simulation walks the dummy batch in the
client's batch schedule (for one local step: the whole dummy batch, the expected batch when q = 1).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.inversion.adaptive import AdaptiveOptions, adaptive_spec
from adversary.inversion.options import Preset
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.solver import Attack
from adversary.registry import ATTACKS


class IgDpsgdOptions(AdaptiveOptions):
    name: Literal["ig-dpsgd"] = Field(
        "ig-dpsgd",
        description="Inverting Gradients simulating DP-SGD's per-sample clipping, with its noise's likelihood",
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("dpsgd",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset({"per_sample_clip", "noise_sigma", "loss"})
    presets: ClassVar[dict[str, Preset]] = {
        "paper-001": Preset(
            dict(iterations=10000),
            source="Data Reconstruction Attacks and Defenses: A Systematic Evaluation, appendix: "
            "10,000 Adam iterations, step decay x0.1 at 3/8, 5/8 and 7/8, against every defense",
            summary="10000 iterations",
        ),
    }
    # TV 1.0 with the likelihood: ig-noise's choice for the same Gaussian data term (bench/adaptive_tuning.py);
    # tuning searches it in every setting
    field_defaults: ClassVar[dict[str, Any]] = {**IG_DEFAULTS, "regularizers": [{"name": "tv", "weight": 1.0}]}

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        clip = float(defense.options.get("max_grad_norm", 1.0))
        changes: dict[str, Any] = {"per_sample_clip": clip}
        multiplier = defense.options.get("noise_multiplier")
        if multiplier is None or float(multiplier) == 0 or setting.lr is None:
            return changes | {"loss": "cosine"}
        steps = setting.local_steps or 1  # clients training for epochs: one step's noise, a lower estimate
        std = math.sqrt(steps) * float(multiplier) * clip / max(1, setting.batch_size)
        return changes | {"loss": "l2", "noise_sigma": std}


ATTACKS.register(
    "ig-dpsgd",
    help="adaptive (dpsgd): Inverting Gradients on the simulated per-sample-clipped step, in units of DP-SGD's noise",
    config=IgDpsgdOptions,
)(Attack(adaptive_spec("ig-dpsgd")))
