"""Unit tests of `adversary.priors`."""
