"""Threat models, gradient-inversion attacks, label recovery and leakage metrics."""

from fedsim.registry import Registry

# Attacks register here as they are implemented (adversary issue).
ATTACKS: Registry = Registry("attack")

__all__ = ["ATTACKS"]
