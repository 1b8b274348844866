"""Unit tests of `fedsim.sweep`."""
