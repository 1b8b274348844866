"""GradInversion (Yin, Mallya, Vahdat, Alvarez, Kautz & Molchanov, CVPR 2021), BatchNorm prior.

Inverting Gradients' objective plus the BatchNorm-statistics prior R_BN (eq. 5): the per-layer batch
mean and variance of the dummy batch are pulled (L2) towards those of the victim's batch. The attacker
derives the victim's statistics from the running statistics the client sent
(``model.victim_batch_statistics``); that is only allowed when the threat model grants it, so
``adversary.knows.bn_statistics: false`` is an error rather than a silent fallback to ``ig`` (a run
would otherwise report GradInversion numbers for what is Inverting Gradients). Yin et al.'s group
consistency and image-fidelity priors (which need a batch of restarts to agree and a pretrained
generator-free registration) are not included.
"""

from __future__ import annotations

from adversary.attacks.inverting_gradients import DEFAULTS as IG_DEFAULTS
from adversary.attacks.solver import Attack
from adversary.attacks.spec import AttackSpec
from adversary.registry import ATTACKS

SPEC = AttackSpec(
    name="gradinversion",
    defaults={**IG_DEFAULTS, "bn_weight": 1e-2},
    signed=True,
    box=True,
    lr_decay=True,
    bn_prior=True,
)

ATTACKS.register(
    "gradinversion", help="GradInversion (Yin et al. 2021): Inverting Gradients plus a BatchNorm-statistics prior"
)(Attack(SPEC))
