"""Threat models, gradient-inversion attacks, label recovery and leakage metrics."""

from adversary.registry import ATTACKS

__all__ = ["ATTACKS"]
