"""Client-side defenses: a registry of training-level and update-level mechanisms (see ``base``)."""

from clients.defenses.base import DefenseContext, DefenseEntry, DefenseOutcome, Update, global_norm
from clients.defenses.registry import DEFENSES

__all__ = ["DEFENSES", "DefenseContext", "DefenseEntry", "DefenseOutcome", "Update", "global_norm"]

# Each module registers its defense in DEFENSES on import.
from clients.defenses import clip, gradient_dropout, noise, prune, soteria  # noqa: E402, F401
from clients.defenses import dpsgd, pdpsgd  # noqa: E402, F401  (training-level)
