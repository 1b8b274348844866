"""The machinery gradient-inversion attacks share: what an attack solves (``problem``), how (``solver``,
``optimizers``, ``objective``, ``regularizers``), on what (``targets``, ``model``, ``labels``), with which
options (``options``, ``spec``, ``requirements``, ``adaptive``), and the entry point ``run_attack``.

``run_attack(options, views, seed, device)`` reconstructs every view; ``recover_labels`` reads a batch's
labels off the classifier layer's update.
"""

from adversary.inversion.labels import recover_labels
from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.run import run_attack

__all__ = ["AttackOptions", "OptimizationOptions", "recover_labels", "run_attack"]
