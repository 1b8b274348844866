"""Unit tests of `clients`."""
