"""Unit tests of `strategies`."""
