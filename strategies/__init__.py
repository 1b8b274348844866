"""Server strategies (FedAvg, SecAgg+), Flower's central-DP wrappers, and the taps that observe them.

Every module of this package is imported here, as ``clients.defenses`` does: a strategy module registers its
strategy in ``STRATEGIES`` (and ``dp`` its mechanisms in ``DP_MECHANISMS``), so a new strategy is one new file.
``base`` (the contract), ``factory``, ``registry`` and ``privacy`` register nothing.
"""

from fedsim.core.registry import import_submodules
from strategies.factory import build_strategy
from strategies.registry import STRATEGIES

__all__ = ["STRATEGIES", "build_strategy"]

import_submodules(__name__, __path__)
