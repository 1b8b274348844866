"""Unit tests of `fedsim.reporting`."""
