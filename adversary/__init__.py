"""Threat models, gradient-inversion attacks, label recovery and leakage metrics."""

from adversary import attacks  # noqa: F401  (registers the attacks)
from adversary.inversion import recover_labels, run_attack
from adversary.registry import ATTACKS

__all__ = ["ATTACKS", "recover_labels", "run_attack"]
