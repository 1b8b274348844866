"""Unit tests of `fedsim.core`."""
