"""Unit tests of `adversary.inversion`."""
