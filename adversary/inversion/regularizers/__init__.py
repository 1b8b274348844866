"""Regularizers of the attack objective, by name: ``adversary.attacks[].regularizers: [{name: tv, weight: 0.03}]``.

One module per term; each registers itself in ``REGULARIZERS`` when this package imports it (every module
of the package is imported, so a new term is one new file).
"""

from adversary.inversion.regularizers.base import Regularizer, RegularizerConfig, RegularizerContext
from adversary.inversion.regularizers.registry import REGULARIZERS
from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["REGULARIZERS", "Regularizer", "RegularizerConfig", "RegularizerContext"]
