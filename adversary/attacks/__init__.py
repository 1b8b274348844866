"""Gradient-inversion attacks (being written)."""
