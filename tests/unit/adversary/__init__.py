"""Unit tests of `adversary`."""
