"""Inverting Gradients (Geiping, Bauermeister, Droege & Moeller, NeurIPS 2020).

Labels are recovered first; the dummy images minimise one minus the cosine similarity between the dummy's
and the observed update over all layers, plus a total-variation regularizer (eq. 4), with Adam on the
*sign* of the gradient, step decay x0.1 at 3/8, 5/8 and 7/8 of the iterations, and a box constraint (images
clamped to the valid input range after every step). Several local steps are inverted by unrolling the
client's SGD (section 5, see ``targets``).

Defaults: lr 0.1, N(0, 1) init as in the paper's code; 1000 iterations instead of the paper's
4800 (CIFAR) / 24000 (ImageNet) so that an attack per round stays affordable on a CPU; raise
``iterations`` for trained or deep models. TV weight 1e-4: the paper's code uses 1e-4 to 1e-1 depending on
the model and data; on digits at 16 px, 1e-2 costs ~25 dB against 1e-4 (sharp strokes pay for TV). With
``optimizer: lbfgs`` neither the sign nor the box applies (they are first-order steps).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from adversary.inversion.options import OptimizationOptions, Preset
from adversary.inversion.solver import Attack
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS

DEFAULTS: dict[str, Any] = dict(
    iterations=1000,
    init="randn",
    init_scale=1.0,
    loss="cosine",
    optimizer="adam",
    lr=0.1,
    regularizers=[{"name": "tv", "weight": 1e-4}],
)


class IgOptions(OptimizationOptions):
    name: Literal["ig"] = Field("ig", description="Inverting Gradients (Geiping et al. 2020)")
    field_defaults: ClassVar[dict[str, Any]] = DEFAULTS
    presets: ClassVar[dict[str, Preset]] = {
        "geiping-2020": Preset(
            dict(iterations=4800, restarts=8),
            source="Geiping et al. 2020, section 5 and their inversefed code: 4,800 signed-Adam iterations on "
            "CIFAR-10 with the step decay, 8 restarts, the lowest loss kept",
            summary="4800 iterations, 8 restarts",
        ),
    }


SPEC = AttackSpec(name="ig", signed=True, box=True, lr_decay=True)

ATTACKS.register(
    "ig", help="Inverting Gradients (Geiping et al. 2020): cosine matching, TV, signed Adam, box", config=IgOptions
)(Attack(SPEC))
