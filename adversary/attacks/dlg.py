"""Deep Leakage from Gradients (Zhu, Liu & Han, NeurIPS 2019).

Dummy images and dummy label logits are optimised jointly with L-BFGS so that the gradient of the
cross-entropy with the soft labels softmax(logits) matches the observed gradient in squared L2 (eq. 4 of
the paper). Defaults follow DLG: 300 iterations, L-BFGS step 1, N(0, 1) init, no regularizer. Paper 003's
setting for aggregated gradients (init_scale 0.05, regularizers [{name: tv, weight: 1e-3}], restarts 3) is
reachable through the options. One "iteration" here is one L-BFGS update with its line search
(torch.optim.LBFGS's ``step`` in DLG's code runs up to 20 of them), so on hard problems (CIFAR-size
images) raise ``iterations`` to the thousands. Labels granted by the threat model (``view.labels``) are
used as they are instead of being optimised.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.inversion.options import OptimizationOptions, Preset
from adversary.inversion.solver import Attack
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS


class DlgOptions(OptimizationOptions):
    name: Literal["dlg"] = Field("dlg", description="DLG (Zhu et al. 2019)")
    field_defaults: ClassVar[dict[str, Any]] = dict(
        iterations=300, init="randn", init_scale=1.0, loss="l2", optimizer="lbfgs", lr=1.0, regularizers=[]
    )
    presets: ClassVar[dict[str, Preset]] = {
        "paper-003": Preset(
            dict(iterations=1300, restarts=1, init="randn", init_scale=0.05, regularizers=[]),
            source="Reconstructing Private Training Data from Gradients in Federated Learning, per-client settings: "
            "--init-scale 0.05, TV off, L-BFGS; 1,300 iterations reach its per-client PSNR (45.9 dB in fedsim)",
            summary="init N(0, 0.05^2), 1300 L-BFGS iterations, TV off",
        ),
        "paper-003-aggregate": Preset(
            dict(
                iterations=300, restarts=3, init="randn", init_scale=0.05, regularizers=[{"name": "tv", "weight": 1e-3}]
            ),
            source="Reconstructing Private Training Data from Gradients in FL, section 4 (the settings that "
            "reconstructed the aggregated gradient): --iterations 300 "
            "--restarts 3 --tv-weight 1e-3 --init-scale 0.05",
            summary="init N(0, 0.05^2), 300 L-BFGS iterations, 3 restarts, TV 1e-3",
        ),
    }


SPEC = AttackSpec(name="dlg", joint_labels=True)

ATTACKS.register(
    "dlg", help="DLG (Zhu et al. 2019): L2 gradient matching, L-BFGS on images and soft labels", config=DlgOptions
)(Attack(SPEC))
