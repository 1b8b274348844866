"""Improved Deep Leakage from Gradients (Zhao, Mopuri & Bilen, arXiv:2001.02610, 2020).

iDLG reads the label off the classifier layer's gradient first (``labels.recover_labels``: iDLG's sign
rule for one sample, generalised to batches) and then optimises only the dummy images, with DLG's L2
gradient matching and L-BFGS. Defaults as DLG's.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.inversion.options import OptimizationOptions
from adversary.inversion.solver import Attack
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS


class IdlgOptions(OptimizationOptions):
    name: Literal["idlg"] = Field("idlg", description="iDLG (Zhao et al. 2020)")
    field_defaults: ClassVar[dict[str, Any]] = dict(
        iterations=300, init="randn", init_scale=1.0, loss="l2", optimizer="lbfgs", lr=1.0, regularizers=[]
    )


SPEC = AttackSpec(name="idlg")

ATTACKS.register(
    "idlg",
    help="iDLG (Zhao et al. 2020): labels from the last layer's gradient, then DLG on images",
    config=IdlgOptions,
)(Attack(SPEC))
