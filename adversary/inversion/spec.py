"""What distinguishes one gradient-inversion attack from another, beside its options."""

from __future__ import annotations

from dataclasses import dataclass

#: The option fields that older configs left null for "the attack's own default"; every attack's options
#: model gives them real defaults now (``tv_weight`` and ``bn_weight`` read its regularizers).
DEFAULTED_FIELDS = ("iterations", "init", "init_scale", "tv_weight", "loss", "optimizer", "lr", "bn_weight")


@dataclass(frozen=True)
class AttackSpec:
    """An attack's structural choices (its defaults are the field defaults of its options model)."""

    name: str
    joint_labels: bool = False  # DLG: soft label logits optimised with the images (else labels recovered first)
    signed: bool = False  # first-order optimizers step on the sign of the gradient (Inverting Gradients)
    box: bool = False  # first-order optimizers clamp the images to view.input_bounds after every step
    lr_decay: bool = False  # Inverting Gradients' step decay at 3/8, 5/8 and 7/8 of the iterations
    bn_prior: bool = False  # GradInversion: needs adversary.knows.bn_statistics and a model with BatchNorm
