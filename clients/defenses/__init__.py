"""Client-side defenses: a registry of training-level and update-level mechanisms (see ``base``)."""

from clients.defenses.base import DefenseContext, DefenseEntry, DefenseOutcome, Update, global_norm
from clients.defenses.registry import DEFENSES

__all__ = ["DEFENSES", "DefenseContext", "DefenseEntry", "DefenseOutcome", "Update", "global_norm"]
