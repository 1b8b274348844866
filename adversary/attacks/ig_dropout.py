"""``ig-dropout``: Inverting Gradients against Gradient Dropout (paper 004), by the likelihood of its Algorithm 1.

Gradient Dropout keeps each entry with probability p, scaled by 1/p, and replaces the others by fresh
N(0, sigma^2) draws. Rescaled by p (``observed_scale``), every observed entry t is therefore either the
client's exact gradient entry g (kept) or N(0, (p sigma)^2) noise (dropped), and a candidate update u explains
it with the mixture

    P(t | u) = p N(t; u, tau^2) + (1 - p) N(t; 0, (p sigma)^2)

whose negative log, averaged over ALL entries, is the data term. The kept component is exact in the mechanism;
its width tau = ``kept_width`` * p sigma stands for the candidate's own error, so that an entry the dummy does
not yet explain is read as possibly dropped instead of pulling with the full weight of an outlier. At the true
images about p of the entries sit at the kept component's peak, where no wrong candidate puts them.

Labels are recovered from the entries above ``noise_multiples`` sigma (kept beyond doubt), and where the learning
rate is unknown (the noise's scale in the observed units is then unknown too) or sigma is 0 (the dropped entries
are exact zeros) the attack matches the nonzero / above-threshold entries with Inverting Gradients' cosine.
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


def dropout_nll(
    dummy: list[torch.Tensor], observed: list[torch.Tensor], p: float, noise_std: float, kept_std: float
) -> torch.Tensor:
    """Mean over every entry of -log(p N(t; u, kept_std^2) + (1 - p) N(t; 0, noise_std^2)), t the observed entry
    (in the kept entries' units) and u the dummy's; constants shared by every candidate are dropped."""
    u = torch.cat([d.reshape(-1) for d in dummy])
    t = torch.cat([o.reshape(-1) for o in observed])
    kept = math.log(p) - math.log(kept_std) - 0.5 * ((t - u) / kept_std) ** 2
    dropped = (
        math.log1p(-p) - math.log(noise_std) - 0.5 * (t / noise_std) ** 2 if p < 1 else torch.full_like(t, -math.inf)
    )
    return -torch.logaddexp(kept, dropped).mean()


class IgDropoutOptions(AdaptiveOptions):
    # TV 1e-2: the best of 1e-4 / 1e-3 / 1e-2 in bench/adaptive_tuning.py (CIFAR-10 test images 0-2), for the
    # cosine on the kept entries; tuning searches it again for the likelihood, in every setting
    field_defaults: ClassVar[dict[str, Any]] = {**IG_DEFAULTS, "regularizers": [{"name": "tv", "weight": 1e-2}]}
    name: Literal["ig-dropout"] = Field(
        "ig-dropout", description="Inverting Gradients with Gradient Dropout's likelihood over every entry"
    )
    adapts_to: ClassVar[tuple[str, ...]] = ("gradient_dropout",)
    adapted_fields: ClassVar[frozenset[str]] = frozenset(
        {"observed_scale", "match_entries", "match_threshold", "dropout_p", "dropout_sigma"}
    )
    presets: ClassVar[dict[str, Preset]] = {
        "paper-004": Preset(
            dict(iterations=4000),
            source="Safeguarding Federated Learning from Data Reconstruction Attacks via Gradient Dropout, "
            "section 5.1: 4,000 attack iterations against batches of 8 "
            "(1,000 for single images; the saturation step doubles them where they lead)",
            summary="4000 iterations",
        ),
    }
    noise_multiples: float = Field(
        4.0, gt=0, description="entries above this many sigma are kept beyond doubt (labels)"
    )
    kept_width: float = Field(
        0.5, gt=0, description="width of the likelihood's kept component, in units of the dropped entries' p * sigma"
    )
    dropout_p: float | None = Field(None, gt=0, le=1, description="Gradient Dropout's p (filled in from the defense)")
    dropout_sigma: float | None = Field(None, ge=0, description="Gradient Dropout's sigma (filled in from the defense)")

    def matching_for(self, defense: DefenseInForce, setting: AttackSetting) -> dict[str, Any]:
        sigma = float(defense.options.get("sigma", 0.0))
        p = float(defense.options.get("p", 1.0))
        changes: dict[str, Any] = {"observed_scale": p, "dropout_p": p, "dropout_sigma": sigma}
        if sigma > 0:
            changes |= {"match_entries": "above-threshold", "match_threshold": self.noise_multiples * sigma}
        else:
            changes |= {"match_entries": "nonzero"}
        return changes

    def gradient_match(
        self,
        dummy: list[torch.Tensor],
        observed: list[torch.Tensor],
        masks: list[torch.Tensor],
        scale_free: bool,
    ) -> torch.Tensor:
        if scale_free or not self.dropout_sigma or self.dropout_p is None:
            return super().gradient_match(dummy, observed, masks, scale_free)
        noise_std = self.dropout_p * self.dropout_sigma
        return dropout_nll(dummy, observed, self.dropout_p, noise_std, self.kept_width * noise_std)


ATTACKS.register(
    "ig-dropout",
    help="adaptive (gradient_dropout): Inverting Gradients with the likelihood of kept (g / p) or dropped "
    "(noise) over every entry",
    config=IgDropoutOptions,
)(Attack(adaptive_spec("ig-dropout")))
