"""Client-side defenses: a registry of training-level and update-level mechanisms (see ``base``).

Every module of this package is imported here, and each defense module registers its defense and its
config model in ``DEFENSES``: a new defense is one new file.
"""

from clients.defenses.base import DefenseConfig, DefenseContext, DefenseEntry, DefenseOutcome, Update, global_norm
from clients.defenses.registry import DEFENSES
from fedsim.core.registry import import_submodules

__all__ = ["DEFENSES", "DefenseConfig", "DefenseContext", "DefenseEntry", "DefenseOutcome", "Update", "global_norm"]

import_submodules(__name__, __path__)
