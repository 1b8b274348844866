"""Unit tests of `fedsim`."""
