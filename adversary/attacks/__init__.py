"""Gradient-inversion attacks as pure functions of an AttackerView: DLG, iDLG, Inverting Gradients, GradInversion.

``run_attack(options, views, seed, device)`` reconstructs every view; ``resolve_options`` fills an attack's
defaults; ``recover_labels`` reads a batch's labels off the classifier layer's update. Importing this
package registers the attacks in ``adversary.ATTACKS``.
"""

from adversary.attacks import dlg, gradinversion, idlg, inverting_gradients  # noqa: F401  (register the attacks)
from adversary.attacks.labels import recover_labels
from adversary.attacks.run import resolve_options, run_attack

__all__ = ["recover_labels", "resolve_options", "run_attack"]
