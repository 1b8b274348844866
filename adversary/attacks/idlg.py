"""Improved Deep Leakage from Gradients (Zhao, Mopuri & Bilen, arXiv:2001.02610, 2020).

iDLG reads the label off the classifier layer's gradient first (``labels.recover_labels``: iDLG's sign
rule for one sample, generalised to batches) and then optimises only the dummy images, with DLG's L2
gradient matching and L-BFGS. Defaults as DLG's.
"""

from __future__ import annotations

from adversary.attacks.solver import Attack
from adversary.attacks.spec import AttackSpec
from adversary.registry import ATTACKS

SPEC = AttackSpec(
    name="idlg",
    defaults=dict(
        iterations=300, init="randn", init_scale=1.0, tv_weight=0.0, loss="l2", optimizer="lbfgs", lr=1.0, bn_weight=0.0
    ),
)

ATTACKS.register("idlg", help="iDLG (Zhao et al. 2020): labels from the last layer's gradient, then DLG on images")(
    Attack(SPEC)
)
