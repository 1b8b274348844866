"""Unit tests of `adversary.attacks`."""
