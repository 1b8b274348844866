"""Gradient-inversion attacks, one file each: DLG, iDLG, Inverting Gradients and its adaptive variants,
GradInversion, deep image prior, GGSS-R, Robbing the Fed, closed-form first-layer inversion and CPA.

Every module of this package is imported here, and each registers its attack and its options model in
``adversary.ATTACKS``: a new attack is one new file. The machinery they share (problem, solver, optimizers,
targets, objective, labels, options, regularizers) is ``adversary.inversion``.
"""

from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)
