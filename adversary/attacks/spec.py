"""What distinguishes one gradient-inversion attack from another, beside its options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.config import AttackOptions

#: The AttackOptions fields whose ``None`` means "the attack's own default".
DEFAULTED_FIELDS = ("iterations", "init", "init_scale", "tv_weight", "loss", "optimizer", "lr", "bn_weight")


@dataclass(frozen=True)
class AttackSpec:
    """An attack's defaults (every field of ``DEFAULTED_FIELDS``) and its structural choices."""

    name: str
    defaults: dict[str, Any]
    joint_labels: bool = False  # DLG: soft label logits optimised with the images (else labels recovered first)
    signed: bool = False  # first-order optimizers step on the sign of the gradient (Inverting Gradients)
    box: bool = False  # first-order optimizers clamp the images to view.input_bounds after every step
    lr_decay: bool = False  # Inverting Gradients' step decay at 3/8, 5/8 and 7/8 of the iterations
    bn_prior: bool = False  # GradInversion's BatchNorm-statistics prior (needs adversary.knows.bn_statistics)

    def __post_init__(self) -> None:
        missing = [key for key in DEFAULTED_FIELDS if self.defaults.get(key) is None]
        if missing:
            raise ValueError(f"attack '{self.name}' has no default for {', '.join(missing)}")

    def resolve(self, options: AttackOptions) -> AttackOptions:
        """A copy of ``options`` with every ``None`` replaced by this attack's default."""
        filled = {key: self.defaults[key] for key in DEFAULTED_FIELDS if getattr(options, key) is None}
        return options.model_copy(update=filled)
