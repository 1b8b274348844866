"""Gradient-inversion attacks as pure functions of an AttackerView: DLG, iDLG, Inverting Gradients, GradInversion.

``run_attack(options, views, seed, device)`` reconstructs every view; ``recover_labels`` reads a batch's
labels off the classifier layer's update. Every module of this package is imported here, and each attack
module registers its attack and its options model in ``adversary.ATTACKS``: a new attack is one new file.
"""

from adversary.attacks.labels import recover_labels
from adversary.attacks.options import AttackOptions, OptimizationOptions
from adversary.attacks.run import resolve_options, run_attack
from fedsim.base import import_submodules

import_submodules(__name__, __path__)

__all__ = ["AttackOptions", "OptimizationOptions", "recover_labels", "resolve_options", "run_attack"]
